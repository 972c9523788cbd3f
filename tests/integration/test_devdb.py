"""scripts/devdb.py with real servers: a checkout's own PostgreSQL starts on TCP, is reused,
refuses to hand out another checkout's server, and `stop` leaves no process behind.

Each test copies devdb.py into a temporary "checkout" (devdb finds .pgdata next to its
scripts/ folder), so the servers are disposable and never this checkout's."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tests.helpers import bound
from tests.unit.test_devdb import load_devdb

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


class Checkout:
    def __init__(self, path: Path) -> None:
        self.path = path
        (path / "scripts").mkdir(parents=True)
        (path / "scripts" / "devdb.py").write_bytes((ROOT / "scripts" / "devdb.py").read_bytes())
        self.data = path.resolve() / ".pgdata"

    def devdb(self, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        environment = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
        environment.pop("PQJOBS_DEVDB_PORT", None)
        return subprocess.run(
            [sys.executable, str(self.path / "scripts" / "devdb.py"), *args],
            env={**environment, **env},
            capture_output=True,
            text=True,
            timeout=bound(120),
            check=False,
        )

    def postmaster_pid(self) -> int | None:
        try:
            return int((self.data / "postmaster.pid").read_text().split()[0])
        except FileNotFoundError:
            return None

    def kill_server(self) -> None:
        """Teardown: stop this checkout's server even if devdb.py stop failed."""
        self.devdb("stop")
        pid = self.postmaster_pid()
        if pid is not None and process_alive(pid):
            os.kill(pid, 9)


def process_alive(pid: int) -> bool:
    status = Path(f"/proc/{pid}/status")
    try:
        return "State:\tZ" not in status.read_text()
    except FileNotFoundError:
        return False


@pytest.fixture
def checkouts() -> Iterator[list[Checkout]]:
    if not load_devdb().binary_dirs():
        pytest.skip("no PostgreSQL binaries on this machine (devdb would download pgserver's)")
    # Not under tmp_path: as root the servers run as another user, who must traverse the
    # parents, and every pytest session resets /tmp/pytest-of-<user> to mode 700.
    parent = Path(tempfile.mkdtemp(prefix="pqjobs-devdb-"))
    made = [Checkout(parent / "one"), Checkout(parent / "two")]
    try:
        yield made
    finally:
        for checkout in made:
            checkout.kill_server()
        shutil.rmtree(parent, ignore_errors=True)


def free_port() -> str:
    """A port nothing listens on (another checkout's server may hold its derived one)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return str(probe.getsockname()[1])


def connect(url: str) -> psycopg.Connection:
    return psycopg.connect(url, autocommit=True, connect_timeout=5)


def test_a_checkouts_own_server_runs_on_tcp_is_reused_and_stops_without_binaries(checkouts):
    one = checkouts[0]
    port = free_port()
    first = one.devdb("url", "--prefer", "local", PQJOBS_DEVDB_PORT=port)
    assert first.returncode == 0, first.stderr
    url = first.stdout.strip()
    assert url == f"postgres://postgres@127.0.0.1:{port}/pqjobs"
    with connect(url) as conn:
        data_directory = conn.execute("SHOW data_directory").fetchone()[0]
        assert Path(data_directory).resolve() == one.data
        assert conn.execute("SHOW unix_socket_directories").fetchone()[0] == ""
    pid = one.postmaster_pid()
    assert pid is not None

    # the running server, whatever port is asked for now
    again = one.devdb("url", "--prefer", "local", "--suffix", "perf")
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip() == f"postgres://postgres@127.0.0.1:{port}/pqjobs_perf"
    assert one.postmaster_pid() == pid
    connect(again.stdout.strip()).close()  # the database was created

    # stop only signals the postmaster .pgdata names: it needs no pg_ctl on the PATH
    stopped = one.devdb("stop", PATH="/nonexistent")
    assert stopped.returncode == 0, stopped.stderr
    assert f"stopped this checkout's server (pid {pid})" in stopped.stdout
    assert not process_alive(pid)
    assert not (one.data / "postmaster.pid").exists()
    assert "is not running" in one.devdb("stop").stdout


def test_another_checkouts_server_on_the_port_is_refused(checkouts):
    one, two = checkouts
    port = free_port()  # the same port for both
    started = one.devdb("url", PQJOBS_DEVDB_PORT=port)
    assert started.returncode == 0, started.stderr

    refused = two.devdb("url", PQJOBS_DEVDB_PORT=port)
    assert refused.returncode == 1 and refused.stdout == ""
    assert f"127.0.0.1:{port} is served by the PostgreSQL of {one.data}" in refused.stderr
    assert "PQJOBS_DEVDB_PORT" in refused.stderr
    assert not two.data.exists()  # nothing created for two
    with connect(started.stdout.strip()) as conn:  # one's server is untouched
        conn.execute("SELECT 1")

    # with a port of its own, two gets a server of its own
    own = two.devdb("url", PQJOBS_DEVDB_PORT=free_port())
    assert own.returncode == 0, own.stderr
    with connect(own.stdout.strip()) as conn:
        assert Path(conn.execute("SHOW data_directory").fetchone()[0]).resolve() == two.data


def test_drop_stops_the_checkouts_own_server_and_deletes_its_data(checkouts):
    one = checkouts[0]
    started = one.devdb("url", "--prefer", "local", PQJOBS_DEVDB_PORT=free_port())
    assert started.returncode == 0, started.stderr
    pid = one.postmaster_pid()
    assert pid is not None

    dropped = one.devdb("drop")
    assert dropped.returncode == 0, dropped.stderr
    assert f"stopped this checkout's server (pid {pid})" in dropped.stdout
    assert f"deleted {one.data} (this checkout's own server and its databases)" in dropped.stdout
    assert not process_alive(pid)
    assert not one.data.exists()
    again = one.devdb("drop")
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith("devdb: nothing to drop: no .pgdata/")


def test_drop_drops_the_checkouts_databases_on_the_machines_server(tmp_path):
    machine = "postgres://postgres@127.0.0.1:5432/"
    server = machine + "postgres"
    try:
        connect(server).close()
    except psycopg.OperationalError:
        pytest.skip("no PostgreSQL on 127.0.0.1:5432 (the machine's server devdb drops from)")
    one, two = Checkout(tmp_path / "one"), Checkout(tmp_path / "two")
    ours = load_devdb(one.path).SHARED_DATABASE
    theirs = load_devdb(two.path).SHARED_DATABASE
    made = [ours, f"{ours}_perf", f"test_{ours}", f"test_{ours}_second", theirs]
    try:
        for checkout, suffix in [(one, []), (one, ["--suffix", "perf"]), (two, [])]:
            created = checkout.devdb("url", "--prefer", "system", *suffix)
            assert created.returncode == 0, created.stderr
        with connect(server) as admin:
            admin.execute(f"CREATE DATABASE test_{ours}")  # as pytest-django names them
            admin.execute(f"CREATE DATABASE test_{ours}_second")

        # a database in use is left, and said so; the others are dropped
        with connect(f"{machine}test_{ours}_second"):
            refused = one.devdb("drop")
        assert refused.returncode == 1
        for name in (ours, f"{ours}_perf", f"test_{ours}"):
            assert f"devdb: dropped database {name} on 127.0.0.1:5432\n" in refused.stdout
        assert f"could not drop test_{ours}_second (" in refused.stderr
        assert "run drop again" in refused.stderr
        assert existing(server, made) == sorted([f"test_{ours}_second", theirs])

        dropped = one.devdb("drop")
        assert dropped.returncode == 0, dropped.stderr
        assert dropped.stdout == f"devdb: dropped database test_{ours}_second on 127.0.0.1:5432\n"
        assert existing(server, made) == [theirs]  # another checkout's database is left alone
    finally:
        with connect(server) as admin:
            for name in made:
                admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def existing(server: str, names: list[str]) -> list[str]:
    with connect(server) as conn:
        rows = conn.execute(
            "SELECT datname FROM pg_database WHERE datname = ANY(%s) ORDER BY 1", [names]
        ).fetchall()
    return [name for (name,) in rows]
