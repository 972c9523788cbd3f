"""Find or start a PostgreSQL for the demo and the tests, and print its DATABASE_URL.

    python scripts/devdb.py url --prefer embedded   # the demo: a project-local server
    python scripts/devdb.py url --prefer system     # the tests: the machine's server if up
    python scripts/devdb.py stop                    # stop the project-local server

An explicit DATABASE_URL always wins. The project-local ("embedded") server keeps its data
in .pgdata/ at the repository root and listens on 127.0.0.1:54329. It uses the machine's
PostgreSQL binaries when they are installed, else the `pgserver` package from PyPI.
Standard library only: it runs before the virtualenv has anything in it.
"""

from __future__ import annotations

import argparse
import glob
import os
import pwd
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import quote

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / ".pgdata"
PORT = 54329
DATABASE = "pqjobs"
SYSTEM_URL = f"postgres://postgres@127.0.0.1:5432/{DATABASE}"
EMBEDDED_URL = f"postgres://postgres@127.0.0.1:{PORT}/{DATABASE}"


def fail(message: str) -> None:
    print(f"devdb: {message}", file=sys.stderr)
    sys.exit(1)


def accepting(port: int, host: str = "127.0.0.1") -> bool:
    """pg_isready when installed (it checks the server accepts sessions), else a TCP connect."""
    pg_isready = shutil.which("pg_isready")
    if pg_isready:
        ready = subprocess.run(
            [pg_isready, "-q", "-h", host, "-p", str(port), "-t", "2"], check=False
        )
        return ready.returncode == 0
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def wait_accepting(port: int, seconds: float = 30) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if accepting(port):
            return True
        time.sleep(0.3)
    return False


def system_binaries() -> Path | None:
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)
    for directory in candidates:
        if (Path(directory) / "initdb").exists():
            return Path(directory)
    found = shutil.which("initdb")
    return Path(found).parent if found else None


def as_owner(command: list[str]) -> list[str]:
    """initdb and postgres refuse to run as root: run them as the `postgres` user."""
    if os.geteuid() != 0:
        return command
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        fail("running as root and there is no 'postgres' user to run the server as")
    return ["runuser", "-u", "postgres", "--", *command]


def make_reachable(path: Path) -> None:
    """Let the `postgres` user walk to .pgdata when the repository is under a root-only dir.

    As root, initdb and the server run as `postgres` (they refuse to run as root), and the
    data directory must be reachable by that user even when the clone lives under /root
    (mode 700). We add only the search bit (o+x) to each parent directory: `postgres` can
    then traverse to .pgdata but still cannot list or read anything in those directories.
    """
    if os.geteuid() != 0:
        return
    for parent in [*reversed(path.parents)]:
        mode = parent.stat().st_mode
        if not mode & 0o001:
            os.chmod(parent, mode | 0o001)  # search permission only, not read


def start_with_binaries(bin_dir: Path) -> None:
    socket_dir = DATA / "socket"
    if not (DATA / "PG_VERSION").exists():
        DATA.mkdir(exist_ok=True)
        make_reachable(DATA)
        if os.geteuid() == 0:
            shutil.chown(DATA, "postgres", "postgres")
        subprocess.run(
            as_owner(
                [
                    str(bin_dir / "initdb"),
                    "-D",
                    str(DATA),
                    "-U",
                    "postgres",
                    "--auth=trust",
                    "-E",
                    "UTF8",
                    "--no-instructions",
                ]
            ),
            check=True,
            stdout=subprocess.DEVNULL,
        )
    socket_dir.mkdir(exist_ok=True)
    if os.geteuid() == 0:
        shutil.chown(socket_dir, "postgres", "postgres")
    options = f"-p {PORT} -k {socket_dir} -c listen_addresses=127.0.0.1"
    subprocess.run(
        as_owner(
            [
                str(bin_dir / "pg_ctl"),
                "-D",
                str(DATA),
                "-o",
                options,
                "-l",
                str(DATA / "server.log"),
                "-w",
                "start",
            ]
        ),
        check=True,
        stdout=subprocess.DEVNULL,
    )


def pgserver_url() -> str:
    """No system binaries: the `pgserver` wheel ships PostgreSQL and listens on a socket."""
    try:
        import pgserver  # type: ignore[import-not-found]
    except ImportError:
        fail(
            "no PostgreSQL binaries on this machine and the 'pgserver' package is not "
            "installed (pip install pgserver), or set DATABASE_URL"
        )
    DATA.mkdir(exist_ok=True)
    server = pgserver.get_server(str(DATA), cleanup_mode=None)
    server.psql(
        f"SELECT 'CREATE DATABASE {DATABASE}' WHERE NOT EXISTS "
        f"(SELECT FROM pg_database WHERE datname = '{DATABASE}')\\gexec"
    )
    return f"postgres://postgres@{quote(str(DATA), safe='')}/{DATABASE}"


def ensure_database(port: int) -> None:
    """Create the `pqjobs` database if it does not exist yet."""
    try:
        import psycopg
    except ImportError:
        psql = shutil.which("psql")
        if not psql:
            return
        base = [psql, "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", "-d", "postgres"]
        exists = subprocess.run(
            [*base, "-Atc", f"SELECT 1 FROM pg_database WHERE datname = '{DATABASE}'"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        if not exists:
            subprocess.run([*base, "-qc", f"CREATE DATABASE {DATABASE}"], check=True)
        return
    with psycopg.connect(
        host="127.0.0.1", port=port, user="postgres", dbname="postgres", autocommit=True
    ) as conn:
        row = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [DATABASE])
        if row.fetchone() is None:
            conn.execute(f"CREATE DATABASE {DATABASE}")


def embedded_url() -> str:
    if not accepting(PORT):
        bin_dir = system_binaries()
        if bin_dir is None:
            return pgserver_url()
        start_with_binaries(bin_dir)
        if not wait_accepting(PORT):
            fail(f"the embedded server did not start; see {DATA / 'server.log'}")
    ensure_database(PORT)
    return EMBEDDED_URL


def system_url() -> str:
    if not accepting(5432):
        ctl = shutil.which("pg_ctlcluster")
        versions = sorted(os.listdir("/etc/postgresql")) if Path("/etc/postgresql").exists() else []
        if ctl and versions:
            subprocess.run(
                [ctl, "--skip-systemctl-redirect", versions[-1], "main", "start"], check=False
            )
            wait_accepting(5432)
    if not accepting(5432):
        print("devdb: no server on 127.0.0.1:5432; starting a project-local one", file=sys.stderr)
        return embedded_url()
    ensure_database(5432)
    return SYSTEM_URL


def stop() -> None:
    bin_dir = system_binaries()
    if not (DATA / "PG_VERSION").exists() or bin_dir is None:
        print("devdb: no project-local server to stop")
        return
    subprocess.run(
        as_owner([str(bin_dir / "pg_ctl"), "-D", str(DATA), "-m", "fast", "stop"]), check=False
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("action", choices=["url", "stop"])
    parser.add_argument("--prefer", choices=["embedded", "system"], default="embedded")
    args = parser.parse_args()
    if args.action == "stop":
        stop()
        return
    if os.environ.get("DATABASE_URL"):
        print(os.environ["DATABASE_URL"])
        return
    print(embedded_url() if args.prefer == "embedded" else system_url())


if __name__ == "__main__":
    main()
