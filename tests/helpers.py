"""Helpers the tests import: bounded waiting, job status, admin users, real ``run_jobs``
processes, and the plans of the statements run inside the PL/pgSQL functions.

Fixtures live in ``conftest.py``; everything a test calls directly lives here.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.db import DatabaseError, connection
from django.test import Client

from django_pqjobs.models import Job

ROOT = Path(__file__).resolve().parents[1]


# How long a condition may take before the test fails, on a quiet machine. Generous: a
# condition that holds returns at once, so only a failing test waits this long.
WAIT = 60.0


def load_factor() -> float:
    """How many times slower than a quiet machine this one runs now: the 1-minute load
    average per core (at least 1, at most 20). Two copies of the suite on two cores run at
    load 18-29: Django then takes 20-60 s to start where it takes 1 s on a quiet machine."""
    try:
        load = os.getloadavg()[0]
    except OSError:  # no load average here
        return 1.0
    return min(20.0, max(1.0, load / (os.cpu_count() or 1)))


def bound(seconds: float = WAIT) -> float:
    """The one place that stretches every wait of the tests: ``seconds`` on a quiet machine
    becomes ``seconds`` x ``$PQJOBS_TEST_WAIT_SCALE`` (default 1, for a machine slower than
    load shows) x :func:`load_factor` at the moment of the call. Every wait for a
    subprocess, a thread or a condition takes its time from here (``wait_for`` and
    ``wait_status`` call it), so a busy machine fails no test that merely ran slowly."""
    return seconds * float(os.environ.get("PQJOBS_TEST_WAIT_SCALE", "1")) * load_factor()


def wait_for(predicate: Callable[[], Any], timeout: float = WAIT, interval: float = 0.05) -> Any:
    """Poll ``predicate`` until it returns something truthy; fail the test after ``timeout``
    seconds of a quiet machine (stretched by :func:`bound`)."""
    limit = bound(timeout)
    deadline = time.monotonic() + limit
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {limit:.0f} s")
        time.sleep(interval)


def job_status(job_id: int) -> str:
    return Job.objects.values_list("status", flat=True).get(pk=job_id)


def wait_status(job_id: int, *statuses: str, timeout: float = WAIT) -> Job:
    wait_for(lambda: job_status(job_id) in statuses, timeout)
    return Job.objects.get(pk=job_id)


def make_user(name: str, *perms: str, staff: bool = True) -> Client:
    """A test client logged in as a new user with these permissions (codenames)."""
    user = User.objects.create_user(name, password="pw", is_staff=staff)
    for codename in perms:
        user.user_permissions.add(Permission.objects.get(codename=codename))
    client = Client()
    client.force_login(user)
    return client


class WorkerProcess:
    """A ``manage.py run_jobs`` process on the test database; its output goes to a log file
    (a full pipe would block it)."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        # closed in stop(), which run_jobs() always calls
        self.log = tempfile.NamedTemporaryFile("w+", prefix="run_jobs-", suffix=".log")  # noqa: SIM115
        environment = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "tests.settings",
            "PQJOBS_TEST_DATABASE": connection.settings_dict["NAME"],
            **env,
        }
        self.process = subprocess.Popen(
            [sys.executable, "-m", "django", "run_jobs", *args],
            cwd=ROOT,
            env=environment,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )

    @property
    def pid(self) -> int:
        return self.process.pid

    def signal(self, signum: int) -> None:
        self.process.send_signal(signum)

    def poll(self) -> int | None:
        """The exit status, or None while the process runs."""
        return self.process.poll()

    def wait(self, timeout: float = WAIT) -> int:
        """The exit status, waiting at most ``timeout`` seconds of a quiet machine
        (stretched by :func:`bound`)."""
        return self.process.wait(bound(timeout))

    def output(self) -> str:
        self.log.flush()
        return Path(self.log.name).read_text()

    def stop(self) -> None:
        if self.process.poll() is None:
            # the worker processes of `run_jobs --processes N` too: left to notice their
            # supervisor is gone (within a second), they would claim the next test's jobs
            for pid in [*_children_of(self.process.pid), self.process.pid]:
                with suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            self.process.wait(bound(10))
        self.log.close()


def _children_of(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (read from /proc; none where there is none)."""
    found = []
    for entry in Path("/proc").glob("[0-9]*/stat"):
        try:
            # "pid (comm) state ppid ...": comm may hold spaces, so split after its ")"
            fields = entry.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == pid:
            found.append(int(entry.parent.name))
    return found


@contextmanager
def run_jobs(*args: str, **env: str) -> Iterator[WorkerProcess]:
    """``with run_jobs("--concurrency", "4", WORKER_STALE_TIMEOUT="2") as worker: ...``

    The process is killed when the block ends, whatever happens in it; if the block fails,
    the worker's output is printed (pytest shows it with the failure).
    """
    worker = WorkerProcess(list(args), env)
    try:
        yield worker
    except BaseException:
        print(f"--- output of run_jobs {' '.join(args)} (pid {worker.pid}) ---")
        print(worker.output())
        raise
    finally:
        worker.stop()


# A fenced block (its language and its text), and the marker a block has just above:
# <!-- tested: <tag> (<the test>) --> a test runs it; <!-- not run: <reason> --> nothing does.
# (A block in a list item is indented: its fences and its lines by the same amount.)
_FENCED_BLOCK = re.compile(r"^( *)```(\w*)\n(.*?)^\1```$", re.MULTILINE | re.DOTALL)
_MARKER = re.compile(r"<!-- (tested|not run): (.*?) ?-->\n\Z")


@dataclass(frozen=True)
class DocBlock:
    """A fenced code block of the documentation, as a reader sees it."""

    path: str  # relative to the repository's root
    line: int  # of its opening fence
    language: str  # "" when the fence names none
    mark: str | None  # "tested", "not run" or None
    note: str  # the tag of a tested block (its first word), the reason of a block not run
    code: str

    @property
    def tag(self) -> str | None:
        return self.note.split()[0] if self.mark == "tested" and self.note else None

    def __str__(self) -> str:
        return f"{self.path}:{self.line} ({self.language or 'no language'})"


def doc_blocks(path: str) -> list[DocBlock]:
    """Every fenced block of the Markdown file ``path`` (relative to the repository), in
    order, with the marker line just above it. The one extractor of documentation blocks:
    tests run the code the documentation shows, so the two cannot drift apart."""
    text = (ROOT / path).read_text()
    blocks = []
    for block in _FENCED_BLOCK.finditer(text):
        above = text[: block.start()].rsplit("\n", 2)[-2:]
        marker = _MARKER.search("\n".join(above))
        blocks.append(
            DocBlock(
                path=path,
                line=text.count("\n", 0, block.start()) + 1,
                language=block.group(2),
                mark=marker.group(1) if marker else None,
                note=marker.group(2).strip() if marker else "",
                code=re.sub(f"(?m)^{block.group(1)}", "", block.group(3)),
            )
        )
    return blocks


def documented_files() -> list[str]:
    """The Markdown files doc_blocks() covers: README.md and every page under docs/."""
    pages = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").rglob("*.md"))
    return ["README.md", *pages]


def documented_blocks(doc: str, language: str) -> list[tuple[str | None, str]]:
    """Every ```<language> block of ``docs/<doc>``, in order, with the tag of the
    ``<!-- tested: <tag> (...) -->`` line just above it (None for a block without one)."""
    return [
        (block.tag, block.code) for block in doc_blocks(f"docs/{doc}") if block.language == language
    ]


def documented_block(doc: str, tag: str, language: str) -> str:
    """The ```<language> block marked ``<!-- tested: <tag> ... -->`` in ``docs/<doc>``."""
    found = [code for marked, code in documented_blocks(doc, language) if marked == tag]
    assert len(found) == 1, f"docs/{doc} has {len(found)} {language} blocks tested as {tag!r}"
    return found[0]


def documented_sql(doc: str, tag: str) -> str:
    """The SQL block marked ``<!-- tested: <tag> ... -->`` in ``docs/<doc>``."""
    return documented_block(doc, tag, "sql")


def planned_inside(call: Callable[[], object]) -> list[str]:
    """The plans of the statements that ``call`` runs inside the PL/pgSQL functions
    (auto_explain), on a fresh connection: the functions plan their statements anew there
    (once per session), under the settings and statistics of the moment."""
    connection.close()
    connection.ensure_connection()
    with connection.cursor() as cursor:
        try:
            cursor.execute("LOAD 'auto_explain'")
        except DatabaseError:
            pytest.skip("loading auto_explain needs a superuser")
        cursor.execute(
            "SET auto_explain.log_min_duration = 0; "
            "SET auto_explain.log_nested_statements = on; "
            "SET auto_explain.log_level = notice; SET client_min_messages = notice"
        )
    plans: list[str] = []
    connection.connection.add_notice_handler(lambda notice: plans.append(notice.message_primary))
    try:
        call()
    finally:
        connection.close()  # auto_explain stays loaded in that session only
    return plans


def plan_of(plans: list[str], marker: str) -> str:
    """The first of ``plans`` whose statement contains ``marker``."""
    found = [plan for plan in plans if marker in plan]
    assert found, f"no statement with {marker!r} among {plans}"
    return found[0]


def check_ids(**pqjobs: Any) -> set[str]:
    """The ids of django-pqjobs's system checks that fail with ``PQJOBS`` set to these
    keys alone (and the test settings' encryption keys, which the test app's encrypted job
    types need: pqjobs.E092 without them)."""
    from django.core.checks import run_checks
    from django.test import override_settings

    from tests import settings as test_settings

    keys = {"ENCRYPTION_KEYS": test_settings.PQJOBS["ENCRYPTION_KEYS"]}
    with override_settings(PQJOBS={**keys, **pqjobs}):
        return {m.id for m in run_checks() if m.id and m.id.startswith("pqjobs.")}


def drop_history_partitions() -> None:
    """Drop every history partition of the test database (with what they hold): a test that
    made some leaves none behind, whose statistics would skew the next test's estimates."""
    from django_pqjobs.worker.housekeeping import RETAINED

    with connection.cursor() as cursor:
        for status in RETAINED:
            cursor.execute("SELECT pqjobs_history_drop(%s, 'infinity'::date)", [status])
