"""The time of ``manage.py migrate`` on an empty database: the squash against the long chain.

Run: DATABASE_URL=postgres://... python benchmarks/migrate_time.py [rounds]

Each round makes empty databases (``CREATE DATABASE ... TEMPLATE template0`` on the server
of DATABASE_URL, dropped after) and times, in a new process each, what a new install runs:

- ``squash``: ``testproject/manage.py migrate`` (a fresh database runs
  ``0001_squashed_0025_fair_claiming``, then the migrations after it);
- ``chain``: the same with the squash left out of Django's migration loader
  (``scripts/squash_migrations.py chain migrate``), as every install ran it before;
- the same two for ``migrate django_pqjobs`` alone (the project's other apps left out), and
  up to 0025 only (what the squash replaces: the squash itself against 0001-0025);
- ``check``: ``manage.py check``, the floor: starting Python and Django, loading the project.

The variants alternate within each round (and their order each round), so a busy machine
slows them alike; the medians, the figures above the floor (the time ``migrate`` itself
takes) and the median of each round's difference between chain and squash are what to
compare.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
MANAGE = [sys.executable, str(ROOT / "testproject" / "manage.py")]
CHAIN = [sys.executable, str(ROOT / "scripts" / "squash_migrations.py"), "chain"]
VARIANTS = {
    "squash": [*MANAGE, "migrate"],
    "chain": [*CHAIN, "migrate"],
    "squash, django_pqjobs only": [*MANAGE, "migrate", "django_pqjobs"],
    "chain, django_pqjobs only": [*CHAIN, "migrate", "django_pqjobs"],
    "squash, to 0025": [*MANAGE, "migrate", "django_pqjobs", "0001_squashed_0025_fair_claiming"],
    "chain, to 0025": [*CHAIN, "migrate", "django_pqjobs", "0025"],
    "check (floor)": [*MANAGE, "check"],
}


def timed(command: list[str], url: str) -> float:
    env = {**os.environ, "DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": "config.settings"}
    started = time.perf_counter()
    subprocess.run(
        [*command, "--verbosity", "0"], env=env, cwd=ROOT, check=True, stdout=subprocess.DEVNULL
    )
    return time.perf_counter() - started


def main() -> None:
    import psycopg

    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    parts = urlsplit(os.environ["DATABASE_URL"])
    times: dict[str, list[float]] = {name: [] for name in VARIANTS}
    with psycopg.connect(urlunsplit(parts._replace(path="/postgres")), autocommit=True) as admin:
        for number in range(rounds):
            # alternate the order too: first or last in a round is no advantage
            order = list(VARIANTS) if number % 2 == 0 else list(reversed(VARIANTS))
            for name in order:
                database = f"pqjobs_migrate_time_{uuid.uuid4().hex[:8]}"
                admin.execute(f"CREATE DATABASE {database} TEMPLATE template0")
                try:
                    url = urlunsplit(parts._replace(path=f"/{database}"))
                    times[name].append(timed(VARIANTS[name], url))
                finally:
                    admin.execute(f"DROP DATABASE {database} WITH (FORCE)")
    floor = statistics.median(times["check (floor)"])
    print(f"{rounds} rounds; median (min-max) seconds; above the floor of manage.py check")
    print(f"{'variant':<28} {'median':>7} {'min':>6} {'max':>6} {'above floor':>12}")
    for name, found in times.items():
        median = statistics.median(found)
        print(
            f"{name:<28} {median:>7.2f} {min(found):>6.2f} {max(found):>6.2f} "
            f"{median - floor:>12.2f}"
        )
    # within a round the two ran close in time: their difference drifts less with the load
    print("the chain's time less the squash's, median of the rounds' differences:")
    for scope in ("", ", django_pqjobs only", ", to 0025"):
        pairs = zip(times[f"chain{scope}"], times[f"squash{scope}"], strict=True)
        saved = [chain - squash for chain, squash in pairs]
        print(f"  migrate{scope or ' (all apps)'}: {statistics.median(saved):.2f} s")


if __name__ == "__main__":
    main()
