"""scripts/devdb.py without a server: names, ports, and what counts as this checkout's server."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest
from django.conf import settings

from tests.helpers import bound

ROOT = Path(__file__).resolve().parents[2]


def load_devdb(root: Path = ROOT) -> ModuleType:
    """scripts/devdb.py as a module (scripts/ is not a package); ``root`` is the checkout."""
    name = f"devdb_of_{abs(hash(str(root)))}"
    spec = importlib.util.spec_from_file_location(name, root / "scripts" / "devdb.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def devdb() -> ModuleType:
    return load_devdb()


def test_test_settings_default_to_the_checkouts_own_database(devdb):
    assert settings.CHECKOUT_DATABASE == devdb.SHARED_DATABASE
    assert devdb.SHARED_DATABASE.startswith("pqjobs_") and devdb.SHARED_DATABASE != "pqjobs"


def test_each_checkout_has_its_own_database_and_port(tmp_path, devdb, monkeypatch):
    monkeypatch.delenv("PQJOBS_DEVDB_PORT", raising=False)
    copies = []
    for name in ("one", "two"):
        (tmp_path / name / "scripts").mkdir(parents=True)
        (tmp_path / name / "scripts" / "devdb.py").write_bytes(
            (ROOT / "scripts" / "devdb.py").read_bytes()
        )
        copies.append(load_devdb(tmp_path / name))
    assert copies[0].SHARED_DATABASE != copies[1].SHARED_DATABASE
    data_of_one = (tmp_path / "one").resolve() / ".pgdata"
    assert data_of_one == copies[0].DATA
    # the port follows the checkout's id, within the documented range
    monkeypatch.setattr(devdb, "CHECKOUT_ID", "00000000")
    assert devdb.local_port() == 54400
    monkeypatch.setattr(devdb, "CHECKOUT_ID", "00000001")
    assert devdb.local_port() == 54401
    monkeypatch.setattr(devdb, "CHECKOUT_ID", "ffffffff")
    assert devdb.local_port() in range(54400, 55000)


def test_port_from_the_environment(devdb, monkeypatch, capsys):
    monkeypatch.setenv("PQJOBS_DEVDB_PORT", "55432")
    assert devdb.local_port() == 55432
    monkeypatch.setenv("PQJOBS_DEVDB_PORT", "postgres")
    with pytest.raises(SystemExit):
        devdb.local_port()
    assert "PQJOBS_DEVDB_PORT='postgres' is not a port number" in capsys.readouterr().err


def test_database_suffix(devdb, capsys):
    assert devdb.database_name("pqjobs_ab", None) == "pqjobs_ab"
    assert devdb.database_name("pqjobs_ab", "perf") == "pqjobs_ab_perf"
    with pytest.raises(SystemExit):
        devdb.database_name("pqjobs_ab", "x; DROP DATABASE y")
    assert "--suffix" in capsys.readouterr().err


def test_drop_picks_only_this_checkouts_databases(devdb, monkeypatch):
    monkeypatch.setattr(devdb, "SHARED_DATABASE", "pqjobs_0123abcd")
    names = [
        "pqjobs_0123abcd",  # its database
        "pqjobs_0123abcd_perf",  # with --suffix
        "test_pqjobs_0123abcd",  # pytest-django's
        "test_pqjobs_0123abcd_second",
        "test_pqjobs_0123abcd_gw1",
        "pqjobs_89abcdef",  # another checkout's
        "test_pqjobs_89abcdef",
        "pqjobs",  # a checkout's own server's, never on the machine's
        "pqjobs_0123abcde",
        "pqjobs_0123abcd-x",
        "mytest_pqjobs_0123abcd",
        "postgres",
    ]
    assert devdb.own_databases(names) == [
        "pqjobs_0123abcd",
        "pqjobs_0123abcd_perf",
        "test_pqjobs_0123abcd",
        "test_pqjobs_0123abcd_gw1",
        "test_pqjobs_0123abcd_second",
    ]


def test_drop_without_anything_to_drop_says_so(devdb, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(devdb, "DATA", tmp_path / ".pgdata")
    monkeypatch.setattr(devdb, "drop_system_databases", lambda: ([], []))
    monkeypatch.delenv("DATABASE_URL", raising=False)
    devdb.drop()
    assert capsys.readouterr().out == (
        "devdb: nothing to drop: no .pgdata/ and no database of this checkout on 127.0.0.1:5432\n"
    )


def test_drop_leaves_a_database_url_alone_and_says_so(devdb, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(devdb, "DATA", tmp_path / ".pgdata")
    monkeypatch.setattr(devdb, "drop_system_databases", lambda: ([], []))
    monkeypatch.setenv("DATABASE_URL", "postgres://app@db.example.com/production")
    devdb.drop()
    assert "DATABASE_URL is set" in capsys.readouterr().err


def test_drop_deletes_the_data_directory_even_when_a_database_is_in_use(
    devdb, tmp_path, monkeypatch, capsys
):
    data = tmp_path / ".pgdata"
    (data / "base").mkdir(parents=True)
    monkeypatch.setattr(devdb, "DATA", data)
    monkeypatch.delenv("DATABASE_URL", raising=False)
    monkeypatch.setattr(
        devdb,
        "drop_system_databases",
        lambda: (["pqjobs_0123abcd"], ["test_pqjobs_0123abcd (being accessed by other users)"]),
    )
    with pytest.raises(SystemExit):
        devdb.drop()
    assert not data.exists()
    err = capsys.readouterr().err
    assert err == (
        "devdb: could not drop test_pqjobs_0123abcd (being accessed by other users). Stop what "
        "uses it (a demo, a test run, a worker) and run drop again\n"
    )


def write_postmaster_pid(data: Path, pid: int, port: int, listen: str = "127.0.0.1") -> None:
    data.mkdir(exist_ok=True)
    # the layout PostgreSQL writes: pid, data dir, start time, port, socket dir, listen address
    lines = [str(pid), str(data), "1700000000", str(port), "", listen, "  5432001  0", "ready"]
    (data / "postmaster.pid").write_text("\n".join(lines) + "\n")


def test_a_postmaster_pid_whose_process_is_not_its_server_is_ignored(devdb, tmp_path, monkeypatch):
    data = tmp_path / ".pgdata"
    monkeypatch.setattr(devdb, "DATA", data)
    assert devdb.running_postmaster() is None  # no file
    # left by a crash, the pid now another process's (this one's): never signalled by stop
    write_postmaster_pid(data, os.getpid(), 54999)
    assert devdb.running_postmaster() is None
    devdb.stop()  # says it is not running, sends no signal (this test would be interrupted)


def test_a_running_server_is_recognised_by_its_command_line(devdb, tmp_path, monkeypatch):
    data = tmp_path / ".pgdata"
    monkeypatch.setattr(devdb, "DATA", data)
    # a stand-in process whose command line names the data directory, as a postmaster's does
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", str(data)])
    try:
        # until the child has exec'd, its command line is still this process's
        cmdline = Path(f"/proc/{sleeper.pid}/cmdline")
        deadline = time.monotonic() + 10
        while str(data).encode() not in cmdline.read_bytes() and time.monotonic() < deadline:
            time.sleep(0.01)
        write_postmaster_pid(data, sleeper.pid, 54999)
        assert devdb.running_postmaster() == devdb.Postmaster(sleeper.pid, 54999, "127.0.0.1")
        write_postmaster_pid(data, sleeper.pid, 54999, listen="")
        assert devdb.running_postmaster().listen_address == ""
    finally:
        sleeper.kill()
        sleeper.wait(bound(5))
