"""docs/quickstart.md as a newcomer follows it: every snippet runs as written there.

A project made by ``startproject``, with an app ``shop`` whose ``Order`` model the quickstart
assumes, gets the quickstart's settings, ``jobs.py``, view and ``wsgi.py`` lines; its
``migrate``, ``check`` and ``run_jobs`` commands run as the doc writes them, on a database of
their own; its shell snippets run in that project. Only the database's address and the mail
backend are the test's, appended after the doc's settings.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys

import psycopg
import pytest
from django.core.management import call_command
from django.db import connection

from tests.helpers import documented_block, documented_blocks

pytestmark = pytest.mark.slow

DOC = "quickstart.md"

# The reader's own app, which the quickstart takes as given.
ORDER_MODEL = """\
from django.db import models


class Order(models.Model):
    email = models.EmailField()
    receipt_sent_at = models.DateTimeField(null=True, blank=True)
"""

# What the reader types in `python manage.py shell` (and a view called as a request would),
# after `run_jobs` started. Prints what the test checks.
SHELL = """\
import json
import pathlib
import sys
import threading
import time

import mysite.wsgi
from django.test import RequestFactory

from django_pqjobs.models import Job
from shop.views import place_order

snippets = json.loads(pathlib.Path(sys.argv[1]).read_text())
placed = place_order(RequestFactory().post("/orders/", {"email": "bob@example.com"}))
shell = {}
exec(snippets["quickstart-enqueue"], shell)
exec(snippets["quickstart-failing-enqueue"], shell)
deadline = time.monotonic() + 60
while Job.objects.filter(status__in=["ready", "running"]).exists():
    assert time.monotonic() < deadline, list(Job.objects.values("job_type", "status"))
    time.sleep(0.2)
exec(snippets["quickstart-inspect"], shell)
print(json.dumps({
    "placed": placed.status_code,
    "embedded": [t.name for t in threading.enumerate() if t.name.startswith("pqjobs")],
    "inspected": [shell["job"].pk, shell["job"].status, shell["job"].result],
    "job_id": shell["job_id"],
    "failing_id": shell["failing_id"],
    "failed": list(shell["Job"].objects.failed().values_list("pk", "attempts")),
    "jobs": list(Job.objects.order_by("pk").values_list("job_type", "queue", "status")),
}))
"""


def commands(block: str) -> list[list[str]]:
    """The command lines of a bash block, with this test's Python for ``python``."""
    lines = [shlex.split(line, comments=True) for line in block.splitlines()]
    assert all(line[0] == "python" for line in lines if line), block
    return [[sys.executable, *line[1:]] for line in lines if line]


def test_every_python_snippet_of_the_quickstart_is_tested():
    untested = [code for tag, code in documented_blocks(DOC, "python") if tag is None]
    assert untested == []


def test_the_quickstart_runs_as_written(tmp_path, empty_database):
    snippets = {tag: code for tag, code in documented_blocks(DOC, "python")}
    snippets_file = tmp_path / "snippets.json"
    snippets_file.write_text(json.dumps(snippets))
    project = tmp_path / "mysite"
    project.mkdir()
    call_command("startproject", "mysite", str(project), verbosity=0)
    (project / "shop" / "migrations").mkdir(parents=True)
    for name in ("shop/__init__.py", "shop/migrations/__init__.py"):
        (project / name).touch()
    (project / "shop" / "models.py").write_text(ORDER_MODEL)
    (project / "shop" / "jobs.py").write_text(
        snippets["quickstart-jobs"] + "\n\n" + snippets["quickstart-failing-job"]
    )
    (project / "shop" / "views.py").write_text(snippets["quickstart-view"])
    with (project / "mysite" / "wsgi.py").open("a") as wsgi:
        wsgi.write("\n" + snippets["quickstart-wsgi"])
    database = connection.settings_dict
    mail = tmp_path / "mail"
    settings_file = project / "mysite" / "settings.py"
    backend = "django.core.mail.backends.filebased.EmailBackend"
    if "MAILERS" in settings_file.read_text():  # Django 6.1's startproject configures mail so
        mail_settings = (
            f"MAILERS = {{'default': {{'BACKEND': {backend!r}, "
            f"'OPTIONS': {{'file_path': {str(mail)!r}}}}}}}\n"
        )
    else:
        mail_settings = f"EMAIL_BACKEND = {backend!r}\nEMAIL_FILE_PATH = {str(mail)!r}\n"
    with settings_file.open("a") as settings:
        settings.write(
            '\nINSTALLED_APPS += ["shop"]\n'
            + snippets["quickstart-settings"]
            + snippets["quickstart-dev-settings"]
            + "# the test's database and mail instead of the reader's\n"
            + f"DATABASES['default'].update(NAME={empty_database!r}, "
            + f"USER={database['USER']!r}, PASSWORD={database['PASSWORD']!r}, "
            + f"HOST={database['HOST']!r}, PORT={database['PORT']!r})\n"
            + mail_settings
        )
    env = {
        **{k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"},
        "WORKER_ENABLED": "true",
    }

    def run(command: list[str], **extra: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            command, cwd=project, env={**env, **extra}, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, f"{shlex.join(command)}:\n{done.stdout}{done.stderr}"
        return done

    run([sys.executable, "manage.py", "makemigrations", "shop", "-v", "0"])  # the reader's app
    migrate_block = documented_block(DOC, "quickstart-migrate", "bash")
    for command in commands(migrate_block):
        run(command)

    # the number of tables the doc says migrate creates (a partition is part of its table)
    [stated] = re.findall(r"creates the job queue's (\d+) tables", migrate_block)
    with psycopg.connect(**_params(empty_database), autocommit=True) as conn:
        tables = conn.execute(
            "SELECT count(*) FROM pg_class WHERE relkind IN ('r', 'p') AND NOT relispartition "
            "AND relname LIKE 'pqjobs\\_%'"
        ).fetchone()
    assert tables == (int(stated),)

    [worker_command] = commands(documented_block(DOC, "quickstart-worker", "bash"))
    worker = subprocess.Popen(
        worker_command,
        cwd=project,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        # the shell's process is not a worker: its wsgi.py starts none with WORKER_ENABLED=false
        shell = run([sys.executable, "-c", SHELL, str(snippets_file)], WORKER_ENABLED="false")
    finally:
        worker.send_signal(signal.SIGTERM)  # "Stop it with SIGTERM or Ctrl-C"
        output, _ = worker.communicate(timeout=30)
    assert worker.returncode == 0, output

    seen = json.loads(shell.stdout)
    assert seen["placed"] == 201
    assert seen["embedded"] == []
    assert seen["inspected"] == [seen["job_id"], "done", {"to": "ada@example.com"}]
    assert seen["failed"] == [[seen["failing_id"], 2]]
    assert seen["jobs"] == [
        ["send_receipt", "emails", "done"],  # the view's, on commit
        ["send_receipt", "emails", "done"],  # the shell's
        ["always_fails", "default", "failed"],
    ]
    sent = "".join(path.read_text() for path in mail.iterdir())
    assert sent.count("Subject: Your receipt") == 2
    assert "To: bob@example.com" in sent and "To: ada@example.com" in sent


def _params(name: str) -> dict[str, object]:
    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    return {**params, "dbname": name}
