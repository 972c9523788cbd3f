"""docs/quickstart.md as a newcomer follows it, from an empty directory to a first job done.

The test does what the page says and nothing else, in its order: each block marked
``<!-- tested: quickstart-<step> ... -->`` is one step:

- ``quickstart-run``: a bash block, run line by line in the project's directory;
- ``quickstart-file``: a Python block whose first line names a file (``# shop/jobs.py``),
  written to it; ``# <file>, at the end`` appends to it;
- ``quickstart-background``: a command left running (``run_jobs``, ``runserver``); started
  again, it is stopped (SIGTERM, as the page says) and restarted; every one is stopped at the
  end, and each is bounded in time;
- ``quickstart-shell``: what the reader types in ``python manage.py shell``.

The test's own inputs are the environment a reader's machine has: the virtualenv's ``bin``
first on PATH, PostgreSQL's ``PG*`` variables (a database name of the test's own, dropped at
the end), the ``DJANGO_SUPERUSER_*`` variables that answer ``createsuperuser`` (run with
``--noinput``: a test has no terminal), and a free port in place of 8000. Then it checks what
the page promises: the receipts were mailed (the console backend, in the worker's output),
the jobs are done or failed as described, and the admin console lists them to the superuser.
"""

from __future__ import annotations

import http.cookiejar
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
import uuid
from pathlib import Path

import psycopg
import pytest
from django.db import connection

from tests.helpers import bound, doc_blocks

pytestmark = pytest.mark.slow

DOC = "docs/quickstart.md"
STEP = re.compile(r"quickstart-(run|file|shell|background)")
SUPERUSER = {"USERNAME": "admin", "EMAIL": "admin@example.com", "PASSWORD": "a-long-passw0rd"}
PROCESS_LIMIT = 120  # seconds any one step, or a background process, may take


def steps() -> list[tuple[str, str]]:
    """The page's steps, in order: (kind, code)."""
    found = []
    for block in doc_blocks(DOC):
        if block.mark == "tested":
            step = STEP.fullmatch(block.tag or "")
            assert step, f"{block}: unknown step {block.tag!r}"
            found.append((step.group(1), block.code))
        else:
            assert block.mark == "not run", f"{block} is neither a step nor marked not run"
    return found


def page_code() -> str:
    return "".join(block.code for block in doc_blocks(DOC))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Background:
    """The commands a reader leaves running in terminals of their own."""

    def __init__(self, cwd: Path, env: dict[str, str], logs: Path) -> None:
        self.cwd, self.env, self.logs = cwd, env, logs
        self.running: dict[str, subprocess.Popen[bytes]] = {}
        self.started: list[tuple[str, Path]] = []

    def start(self, line: str) -> None:
        self.stop(line)  # "Ctrl-C, then start it again"
        log = self.logs / f"background-{len(self.started)}.log"
        self.started.append((line, log))
        with log.open("wb") as out:
            self.running[line] = subprocess.Popen(
                ["bash", "-c", f"exec {line}"],
                cwd=self.cwd,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def stop(self, line: str) -> None:
        process = self.running.pop(line, None)
        if process is None:
            return
        os.killpg(process.pid, signal.SIGTERM)  # its terminal's group: runserver's reloader too
        try:
            process.wait(bound(40))
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            raise AssertionError(f"{line!r} did not stop on SIGTERM") from None

    def stop_all(self) -> None:
        for line in list(self.running):
            self.stop(line)

    def output(self, command: str) -> str:
        return "".join(log.read_text() for line, log in self.started if command in line)


def wait_for_port(port: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while True:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        assert time.monotonic() < deadline, f"nothing listens on port {port}"
        time.sleep(0.2)


def test_every_block_of_the_quickstart_is_a_step_or_says_why_not():
    kinds = [kind for kind, _ in steps()]
    assert kinds.count("run") >= 3 and "background" in kinds and "shell" in kinds


def test_the_quickstart_runs_as_written(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    port = free_port()
    database = f"pqjobs_quickstart_{uuid.uuid4().hex[:8]}"
    params = connection.settings_dict
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "PG", "DATABASE"))},
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "PGDATABASE": database,
        "PGHOST": str(params["HOST"] or "127.0.0.1"),
        "PGPORT": str(params["PORT"] or 5432),
        "PGUSER": str(params["USER"]),
        **({"PGPASSWORD": str(params["PASSWORD"])} if params["PASSWORD"] else {}),
        **{f"DJANGO_SUPERUSER_{key}": value for key, value in SUPERUSER.items()},
    }
    env.pop("WORKER_ENABLED", None)
    background = Background(project, env, tmp_path)

    def run(line: str) -> str:
        if line.startswith("python manage.py createsuperuser"):
            line += " --noinput"  # the DJANGO_SUPERUSER_* variables answer its questions
        done = subprocess.run(
            ["bash", "-c", line],
            cwd=project,
            env=env,
            capture_output=True,
            text=True,
            timeout=PROCESS_LIMIT,
        )
        assert done.returncode == 0, f"{line}:\n{done.stdout}{done.stderr}"
        return done.stdout

    try:
        for kind, code in steps():
            code = code.replace("8000", str(port))
            if kind == "run":
                for line in code.splitlines():
                    if line.strip() and not line.startswith("#"):
                        if "curl" in line:
                            wait_for_port(port)
                        run(line)
            elif kind == "background":
                [line] = [line for line in code.splitlines() if line.strip()]
                background.start(line)
            elif kind == "shell":
                run(f"python manage.py shell -c {shlex.quote(code)}")
            else:
                first, _, body = code.partition("\n")
                name, at_the_end = re.fullmatch(r"# (\S+?)(, at the end.*)?", first).groups()
                with (project / name).open("a" if at_the_end else "w") as file:
                    file.write(("\n" + body) if at_the_end else code)

        with psycopg.connect(_conninfo(env), autocommit=True) as conn:
            deadline = time.monotonic() + 60
            while conn.execute(
                "SELECT count(*) FROM pqjobs_job WHERE status NOT IN ('done', 'failed')"
            ).fetchone() != (0,):
                assert time.monotonic() < deadline, background.output("run_jobs")
                time.sleep(0.3)
            # the number of tables the page says migrate creates (a partition is part of its
            # table; Django's own tables are not the queue's)
            [stated] = re.findall(r"creates the job queue's (\d+) tables", page_code())
            tables = conn.execute(
                "SELECT count(*) FROM pg_class WHERE relkind IN ('r', 'p') AND NOT relispartition"
                " AND relname LIKE 'pqjobs\\_%'"
            ).fetchone()
            assert tables == (int(stated),)
            jobs = conn.execute(
                "SELECT job_type, queue, status, attempts FROM pqjobs_job ORDER BY id"
            ).fetchall()
            orders = conn.execute(
                "SELECT email, receipt_sent_at IS NOT NULL FROM shop_order ORDER BY id"
            ).fetchall()
        assert jobs == [
            ("send_receipt", "emails", "done", 1),  # the order placed with curl
            ("send_receipt", "emails", "done", 1),  # the shell's
            ("always_fails", "default", "failed", 2),
        ]
        assert orders == [("ada@example.com", True), ("bob@example.com", True)]
        console = background.output("run_jobs")
        assert console.count("Subject: Your receipt") == 2, console
        assert "To: ada@example.com" in console and "To: bob@example.com" in console

        # the admin console, as the page says: the superuser logs in and sees the jobs (the
        # development server may be restarting: it reloads when a file it imported changes)
        time.sleep(2)
        wait_for_port(port)
        job_list = _admin_page(port, "/admin/django_pqjobs/job/")
        assert job_list.count("send_receipt") >= 2 and "always_fails" in job_list
    finally:
        background.stop_all()
        with psycopg.connect(_conninfo({**env, "PGDATABASE": "postgres"}), autocommit=True) as c:
            c.execute(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")


def _conninfo(env: dict[str, str]) -> str:
    keys = {"PGDATABASE": "dbname", "PGHOST": "host", "PGPORT": "port", "PGUSER": "user"}
    keys["PGPASSWORD"] = "password"
    return psycopg.conninfo.make_conninfo(**{keys[k]: v for k, v in env.items() if k in keys})


def _admin_page(port: int, path: str) -> str:
    """``path`` of the admin, read as the superuser after logging in with the login form."""
    base = f"http://127.0.0.1:{port}"
    jar = http.cookiejar.CookieJar()
    opener = urllib.request.build_opener(
        urllib.request.ProxyHandler({}), urllib.request.HTTPCookieProcessor(jar)
    )
    opener.open(f"{base}/admin/login/", timeout=30).read()
    token = next(cookie.value for cookie in jar if cookie.name == "csrftoken")
    form = {
        "csrfmiddlewaretoken": token,
        "username": SUPERUSER["USERNAME"],
        "password": SUPERUSER["PASSWORD"],
        "next": path,
    }
    request = urllib.request.Request(
        f"{base}/admin/login/?next={urllib.parse.quote(path)}",
        data=urllib.parse.urlencode(form).encode(),
        headers={"Referer": f"{base}/admin/login/"},
    )
    with opener.open(request, timeout=30) as response:
        assert urllib.parse.urlsplit(response.url).path == path, f"login failed: {response.url}"
        return response.read().decode()
