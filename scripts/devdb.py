"""Find or start a PostgreSQL for the demo and the tests, and print its DATABASE_URL.

    python scripts/devdb.py url --prefer local    # the demo: this checkout's own server
    python scripts/devdb.py url --prefer system   # the tests: the machine's server if up
    python scripts/devdb.py url --prefer system --suffix perf   # a database of its own
    python scripts/devdb.py stop                  # stop this checkout's own server
    python scripts/devdb.py drop                  # delete this checkout's databases

An explicit DATABASE_URL always wins (and `drop` never touches it).

The machine's server (127.0.0.1:5432): every checkout gets databases of its own,
``pqjobs_<id>`` where <id> is a hash of the checkout's path (pytest-django adds ``test_``),
so two people or two clones testing against one server never drop each other's tables.

This checkout's own ("local") server keeps its data in .pgdata/ and listens on 127.0.0.1
only, on a port derived from the checkout's path (54400-54999, or $PQJOBS_DEVDB_PORT), so
two checkouts on one machine each run their own. `drop` stops that server and deletes
.pgdata, and drops this checkout's databases on the machine's server (``pqjobs_<id>``, those
with a --suffix, and pytest-django's ``test_`` ones); `url` makes them again when next run.
Whatever answers on that port must have
this checkout's .pgdata as its data directory, or devdb refuses to use it. The server uses
the machine's PostgreSQL binaries when they are installed; else the binaries of the
`pgserver` wheel, which devdb downloads into .venv/pgserver (nothing else of pgserver is
used: no system user is added). As root, the server runs as the `postgres` user, or as
`nobody` where there is no `postgres` user (initdb and postgres refuse to run as root).

Standard library only: it runs before the virtualenv has anything in it.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import hashlib
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / ".pgdata"
CHECKOUT_ID = hashlib.sha1(str(ROOT).encode()).hexdigest()[:8]
LOCAL_DATABASE = "pqjobs"
SHARED_DATABASE = f"pqjobs_{CHECKOUT_ID}"
SYSTEM_PORT = 5432
LOCAL_PORTS = range(54400, 55000)
PORT_VARIABLE = "PQJOBS_DEVDB_PORT"
PGSERVER_DIR = ROOT / ".venv" / "pgserver"
PGSERVER_REQUIREMENT = "pgserver==0.1.4"  # PostgreSQL 16.2
STOP_SECONDS = 60


def fail(message: str) -> NoReturn:
    print(f"devdb: {message}", file=sys.stderr)
    sys.exit(1)


def note(message: str) -> None:
    print(f"devdb: {message}", file=sys.stderr)


def local_port() -> int:
    """$PQJOBS_DEVDB_PORT, else a port derived from the checkout's path."""
    configured = os.environ.get(PORT_VARIABLE, "").strip()
    if configured:
        if not configured.isdigit() or not 1024 <= int(configured) <= 65535:
            fail(f"{PORT_VARIABLE}={configured!r} is not a port number between 1024 and 65535")
        return int(configured)
    return LOCAL_PORTS[int(CHECKOUT_ID, 16) % len(LOCAL_PORTS)]


def database_name(base: str, suffix: str | None) -> str:
    if suffix is None:
        return base
    if not re.fullmatch(r"[a-z0-9_]{1,20}", suffix):
        fail(f"--suffix {suffix!r}: use 1-20 lowercase letters, digits or underscores")
    return f"{base}_{suffix}"


def url(port: int, database: str) -> str:
    return f"postgres://postgres@127.0.0.1:{port}/{database}"


# --- talking to a server -----------------------------------------------------------------


def listening(port: int) -> bool:
    """Whether anything accepts TCP connections on 127.0.0.1:``port``."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def accepting(port: int) -> bool:
    """pg_isready when installed (it checks the server accepts sessions), else a TCP connect."""
    pg_isready = shutil.which("pg_isready")
    if pg_isready:
        ready = subprocess.run(
            [pg_isready, "-q", "-h", "127.0.0.1", "-p", str(port), "-t", "2"], check=False
        )
        return ready.returncode == 0
    return listening(port)


def wait_accepting(port: int, seconds: float = 30) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if accepting(port):
            return True
        time.sleep(0.3)
    return False


class QueryFailed(Exception):
    pass


def query(port: int, sql: str) -> str | None:
    """The first column of the first row of ``sql`` run as `postgres` in the database
    `postgres` (None when there is no row). psycopg when importable, else psql."""
    try:
        import psycopg
    except ImportError:
        bundled = [d / "psql" for d in binary_dirs() if (d / "psql").exists()]
        psql = shutil.which("psql") or (str(bundled[0]) if bundled else None)
        if psql is None:
            fail("neither psycopg nor psql is available to talk to PostgreSQL")
        connect = ["-h", "127.0.0.1", "-p", str(port), "-U", "postgres", "-d", "postgres"]
        done = subprocess.run(
            [psql, *connect, "-v", "ON_ERROR_STOP=1", "-XAtc", sql],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise QueryFailed(done.stderr.strip()) from None
        lines = done.stdout.splitlines()
        return lines[0] if lines else None
    try:
        with psycopg.connect(
            host="127.0.0.1",
            port=port,
            user="postgres",
            dbname="postgres",
            autocommit=True,
            connect_timeout=5,
        ) as conn:
            cursor = conn.execute(sql)
            row = cursor.fetchone() if cursor.description else None
            return None if row is None else str(row[0])
    except psycopg.Error as exc:
        raise QueryFailed(str(exc).strip()) from None


def ensure_database(port: int, name: str) -> None:
    """Create the database ``name`` if it does not exist yet."""
    exists = query(port, f"SELECT 1 FROM pg_database WHERE datname = '{name}'")
    if exists is None:
        try:
            query(port, f"CREATE DATABASE {name}")
        except QueryFailed as exc:
            if "already exists" not in str(exc):  # created meanwhile by a parallel run
                raise


# --- this checkout's own server ----------------------------------------------------------


@dataclass(frozen=True)
class Postmaster:
    """A running server of .pgdata, as its postmaster.pid describes it."""

    pid: int
    port: int
    listen_address: str


def process_command_line(pid: int) -> str | None:
    """The command line of ``pid``, or None when there is no such process."""
    proc = Path(f"/proc/{pid}/cmdline")
    if Path("/proc/self/cmdline").exists():
        try:
            # empty for a zombie: exited, not yet reaped
            return proc.read_bytes().replace(b"\0", b" ").decode(errors="replace") or None
        except (FileNotFoundError, ProcessLookupError):
            return None
    shown = subprocess.run(
        ["ps", "-o", "args=", "-p", str(pid)], capture_output=True, text=True, check=False
    )
    return shown.stdout.strip() or None


def running_postmaster() -> Postmaster | None:
    """This checkout's server when it runs. A postmaster.pid left by a crash whose pid now
    belongs to another process is not mistaken for it (its command line must name .pgdata)."""
    try:
        lines = (DATA / "postmaster.pid").read_text().splitlines()
        pid, port = int(lines[0]), int(lines[3])
    except (FileNotFoundError, IndexError, ValueError):
        return None
    command = process_command_line(pid)
    if command is None or str(DATA) not in command:
        return None
    return Postmaster(pid, port, lines[5].strip() if len(lines) > 5 else "")


def major_version(bin_dir: Path) -> int | None:
    shown = subprocess.run(
        [str(bin_dir / "pg_ctl"), "--version"], capture_output=True, text=True, check=False
    )
    found = re.search(r"\)\s+(\d+)", shown.stdout)
    return int(found.group(1)) if found else None


def pgserver_bin_dirs() -> list[Path]:
    """pgserver's binaries: downloaded by devdb, or installed in the running Python."""
    dirs = [PGSERVER_DIR / "pgserver" / "pginstall" / "bin"]
    from importlib.util import find_spec  # finds the package without importing it

    spec = find_spec("pgserver")
    if spec is not None and spec.submodule_search_locations:
        dirs += [Path(p) / "pginstall" / "bin" for p in spec.submodule_search_locations]
    return [d for d in dirs if (d / "initdb").exists()]


def binary_dirs() -> list[Path]:
    """Every usable set of PostgreSQL binaries: the machine's first (newest first)."""
    found = [Path(d) for d in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)]
    initdb = shutil.which("initdb")
    if initdb:
        found.append(Path(initdb).resolve().parent)
    found += pgserver_bin_dirs()
    usable: list[Path] = []
    for directory in found:
        if (
            all(os.access(directory / name, os.X_OK) for name in ("initdb", "pg_ctl", "postgres"))
            and directory not in usable
        ):
            usable.append(directory)
    return usable


def install_pgserver() -> Path:
    """Download the pgserver wheel's PostgreSQL binaries into .venv/pgserver."""
    note(
        "no PostgreSQL binaries on this machine: downloading them (the 'pgserver' wheel, "
        f"PostgreSQL 16, ~11 MB) into {PGSERVER_DIR.relative_to(ROOT)}/"
    )
    # The binaries inside do not depend on the Python version, and pgserver 0.1.4 ships
    # wheels for Python 3.9-3.12 only: asking for the 3.11 wheel works under any Python.
    # --target and --no-deps: only the binaries are used, pgserver's Python code never runs.
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    only_binaries = ["--no-deps", "--only-binary=:all:", "--python-version", "3.11"]
    done = subprocess.run(
        [*pip, *only_binaries, "--upgrade", "--target", str(PGSERVER_DIR), PGSERVER_REQUIREMENT],
        check=False,
    )
    dirs = pgserver_bin_dirs() if done.returncode == 0 else []
    if not dirs:
        fail(
            f"could not install {PGSERVER_REQUIREMENT} (no wheel for this platform?); install "
            "PostgreSQL (e.g. apt-get install postgresql) or set DATABASE_URL"
        )
    return dirs[0]


def binaries_for(version: int | None) -> Path:
    """Binaries for a data directory of ``version`` (None: a new one), installing pgserver's
    when the machine has none."""
    dirs = binary_dirs()
    if version is None:
        return dirs[0] if dirs else install_pgserver()
    versions = {d: major_version(d) for d in dirs}
    for directory, found in versions.items():
        if found == version:
            return directory
    if version == 16 and not any(v == 16 for v in versions.values()):
        return install_pgserver()
    have = ", ".join(f"{v} ({d})" for d, v in versions.items()) or "none"
    fail(
        f"{DATA} was created by PostgreSQL {version}; no PostgreSQL {version} binaries here "
        f"(found: {have}). Remove {DATA} (it holds only demo data) or install PostgreSQL "
        f"{version}"
    )


def server_user() -> str | None:
    """Who runs initdb and postgres: the caller, or another user when the caller is root."""
    if os.geteuid() != 0:
        return None
    if DATA.exists() and DATA.stat().st_uid != 0:
        return pwd.getpwuid(DATA.stat().st_uid).pw_name  # the user it was created for
    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            pwd.getpwnam(name)
            if name == "nobody":
                note("running as root and there is no 'postgres' user: the server runs as 'nobody'")
            return name
    fail("running as root and there is neither a 'postgres' nor a 'nobody' user to run as")


def as_user(user: str | None, command: list[str]) -> list[str]:
    return command if user is None else ["runuser", "-u", user, "--", *command]


def make_reachable(path: Path) -> None:
    """Let the server's user walk to ``path`` when the checkout is under a root-only dir.

    As root, initdb and the server run as another user, who must reach .pgdata (and the
    binaries under .venv) even when the clone lives under /root (mode 700). We add only the
    search bit (o+x) to each parent directory: that user can then traverse to them but still
    cannot list or read anything in those directories.
    """
    if os.geteuid() != 0:
        return
    for parent in reversed(path.parents):
        mode = parent.stat().st_mode
        if not mode & 0o001:
            os.chmod(parent, mode | 0o001)  # search permission only, not read


def start_local_server(port: int) -> None:
    """initdb .pgdata when new, then start its server on 127.0.0.1:``port`` (TCP only)."""
    version_file = DATA / "PG_VERSION"
    version = int(version_file.read_text().strip()) if version_file.exists() else None
    bin_dir = binaries_for(version)
    user = server_user()
    make_reachable(bin_dir)
    if version is None:
        DATA.mkdir(exist_ok=True)
        make_reachable(DATA)
        if user is not None:
            shutil.chown(DATA, user, pwd.getpwnam(user).pw_gid)
        note(f"creating this checkout's PostgreSQL in {DATA} ({bin_dir / 'initdb'})")
        initdb = [str(bin_dir / "initdb"), "-D", str(DATA), "-U", "postgres", "--auth=trust"]
        made = subprocess.run(
            as_user(user, [*initdb, "-E", "UTF8"]),
            check=False,
            stdout=subprocess.DEVNULL,
        )
        if made.returncode != 0:
            fail(f"initdb could not create {DATA} (its messages are above)")
    # TCP on 127.0.0.1 only and no Unix socket: a socket path under a deep checkout can be
    # too long for the kernel, and a URL host holding a path is not understood by every
    # DATABASE_URL parser.
    options = f"-p {port} -c listen_addresses=127.0.0.1 -c unix_socket_directories=''"
    pg_ctl = [str(bin_dir / "pg_ctl"), "-D", str(DATA), "-o", options]
    started = subprocess.run(
        as_user(user, [*pg_ctl, "-l", str(DATA / "server.log"), "-w", "-t", "60", "start"]),
        check=False,
        stdout=subprocess.DEVNULL,
    )
    if started.returncode != 0 or not wait_accepting(port):
        fail(f"this checkout's server did not start; see {DATA / 'server.log'}")


def check_identity(port: int) -> None:
    """Refuse a server on ``port`` that is not the one of this checkout's .pgdata."""
    try:
        data_directory = query(port, "SHOW data_directory")
    except QueryFailed as exc:
        fail(
            f"127.0.0.1:{port} answers but not as this checkout's PostgreSQL ({exc}). "
            f"Stop whatever listens there or choose another port with {PORT_VARIABLE}"
        )
    if data_directory is None or Path(data_directory).resolve() != DATA.resolve():
        fail(
            f"127.0.0.1:{port} is served by the PostgreSQL of {data_directory}, not of this "
            f"checkout ({DATA}). Stop that server (scripts/devdb.py stop in its checkout) or "
            f"choose another port with {PORT_VARIABLE}"
        )


def local_url(database: str) -> str:
    running = running_postmaster()
    if running is None:
        port = local_port()
        if listening(port):
            check_identity(port)  # another checkout's server (or anything else) fails here
        else:
            start_local_server(port)
    else:
        if not running.listen_address:
            fail(
                f"this checkout's server (pid {running.pid}) listens on no TCP address (an "
                "older devdb started it): stop it with scripts/devdb.py stop, then run again"
            )
        port = running.port
    check_identity(port)
    ensure_database(port, database)
    note(f"this checkout's own PostgreSQL ({DATA}) on 127.0.0.1:{port}, database {database}")
    return url(port, database)


def stop() -> None:
    """Stop this checkout's server, however it was started (a fast shutdown, as
    `pg_ctl stop -m fast`: no binaries needed, so it works after they are gone)."""
    running = running_postmaster()
    if running is None:
        print(f"devdb: this checkout's server ({DATA}) is not running")
        return
    os.kill(running.pid, signal.SIGINT)
    deadline = time.monotonic() + STOP_SECONDS
    while time.monotonic() < deadline:
        if process_command_line(running.pid) is None:
            print(f"devdb: stopped this checkout's server (pid {running.pid})")
            return
        time.sleep(0.2)
    fail(f"the server (pid {running.pid}) did not stop in {STOP_SECONDS} s; see server.log")


# --- dropping what this checkout made ------------------------------------------------------


def own_databases(names: list[str]) -> list[str]:
    """Those of ``names`` that are this checkout's on the machine's server: its database,
    those with a --suffix, and the test databases pytest-django made of each (``test_``,
    then maybe ``_second`` or a worker's suffix)."""
    own = re.compile(rf"(test_)?{re.escape(SHARED_DATABASE)}(_[a-z0-9_]+)?")
    return sorted(name for name in names if own.fullmatch(name))


def drop_system_databases() -> tuple[list[str], list[str]]:
    """Drop this checkout's databases on the machine's server: the names dropped, and those
    it refused to drop (in use) with its reason."""
    if not accepting(SYSTEM_PORT):
        return [], []
    # A rough filter ("_" matches any character): own_databases() keeps the exact names.
    listed = query(
        SYSTEM_PORT,
        "SELECT string_agg(datname, ' ') FROM pg_database "
        f"WHERE datname LIKE '%{SHARED_DATABASE}%'",
    )
    dropped: list[str] = []
    refused: list[str] = []
    for name in own_databases((listed or "").split()):
        try:
            query(SYSTEM_PORT, f"DROP DATABASE {name}")
        except QueryFailed as exc:
            refused.append(f"{name} ({' '.join(str(exc).split())})")
            continue
        print(f"devdb: dropped database {name} on 127.0.0.1:{SYSTEM_PORT}")
        dropped.append(name)
    return dropped, refused


def drop() -> None:
    """Drop this checkout's databases on the machine's server, stop this checkout's own
    server and delete its data directory. A DATABASE_URL's database is never touched."""
    if os.environ.get("DATABASE_URL"):
        note("DATABASE_URL is set: its database is not this checkout's; drop leaves it alone")
    dropped, refused = drop_system_databases()
    if running_postmaster() is not None:
        stop()
    if DATA.exists():
        shutil.rmtree(DATA)
        print(f"devdb: deleted {DATA} (this checkout's own server and its databases)")
    elif not dropped and not refused:
        print(
            f"devdb: nothing to drop: no {DATA.name}/ and no database of this checkout on "
            f"127.0.0.1:{SYSTEM_PORT}"
        )
    if refused:
        fail(
            f"could not drop {'; '.join(refused)}. Stop what uses it (a demo, a test run, a "
            "worker) and run drop again"
        )


# --- the machine's server ----------------------------------------------------------------


def system_url(database: str, fallback: str) -> str:
    if not accepting(SYSTEM_PORT):
        ctl = shutil.which("pg_ctlcluster")
        versions = sorted(os.listdir("/etc/postgresql")) if Path("/etc/postgresql").exists() else []
        if ctl and versions:
            subprocess.run(
                [ctl, "--skip-systemctl-redirect", versions[-1], "main", "start"], check=False
            )
            wait_accepting(SYSTEM_PORT)
    if not accepting(SYSTEM_PORT):
        note(f"no server on 127.0.0.1:{SYSTEM_PORT}; using this checkout's own")
        return local_url(fallback)
    ensure_database(SYSTEM_PORT, database)
    note(
        f"the machine's PostgreSQL on 127.0.0.1:{SYSTEM_PORT}, "
        f"database {database} (this checkout's own)"
    )
    return url(SYSTEM_PORT, database)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("action", choices=["url", "stop", "drop"])
    parser.add_argument(
        "--prefer",
        choices=["local", "embedded", "system"],
        default="local",
        help="local (alias: embedded): this checkout's own server; system: the machine's",
    )
    parser.add_argument("--suffix", help="a database of its own: pqjobs_..._SUFFIX")
    args = parser.parse_args()
    if args.action == "stop":
        stop()
        return
    if args.action == "drop":
        drop()
        return
    if os.environ.get("DATABASE_URL"):
        print(os.environ["DATABASE_URL"])
        return
    local = database_name(LOCAL_DATABASE, args.suffix)
    if args.prefer == "system":
        print(system_url(database_name(SHARED_DATABASE, args.suffix), fallback=local))
    else:
        print(local_url(local))


if __name__ == "__main__":
    main()
