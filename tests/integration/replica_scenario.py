"""Run by test_read_replica.py in a Django process whose settings name a streaming standby
as ``PQJOBS["READ_DATABASE"]`` (the alias ``replica``; ``default`` is its primary).

With the standby's replay paused after three jobs, two more are enqueued on the primary:
whatever a page reads from the standby sees three jobs, whatever it reads from the primary
sees five. Prints what each page showed, as JSON.
"""

from __future__ import annotations

import json
import re
import time

import django

django.setup()

from django.contrib.auth.models import User  # noqa: E402
from django.db import connections  # noqa: E402
from django.test import Client  # noqa: E402
from django.urls import reverse  # noqa: E402

from django_pqjobs import enqueue_job  # noqa: E402
from django_pqjobs.models import Job  # noqa: E402


def caught_up() -> None:
    """Wait until the standby has replayed everything the primary wrote so far."""
    with connections["default"].cursor() as cursor:
        cursor.execute("SELECT pg_current_wal_lsn()")
        (target,) = cursor.fetchone()
    deadline = time.monotonic() + 30
    with connections["replica"].cursor() as cursor:
        while time.monotonic() < deadline:
            cursor.execute("SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", [target])
            if cursor.fetchone()[0]:
                return
            time.sleep(0.05)
    raise SystemExit("the standby did not catch up in 30 s")


def replay(paused: bool) -> None:
    with connections["replica"].cursor() as cursor:
        cursor.execute(f"SELECT pg_wal_replay_{'pause' if paused else 'resume'}()")


def listed(client: Client) -> list[int]:
    body = client.get(reverse("admin:django_pqjobs_job_changelist")).content.decode()
    return sorted({int(n) for n in re.findall(r"/django_pqjobs/job/(\d+)/change/", body)})


user = User.objects.create_superuser("root", "root@example.com", "pw")
client = Client()
client.force_login(user)
first = [enqueue_job("tests.noop") for _ in range(3)]
caught_up()
replay(paused=False)
replay(paused=True)
later = [enqueue_job("tests.noop") for _ in range(2)]
time.sleep(0.3)  # the primary moves on; the standby, paused, does not

dashboard = client.get(reverse("admin:django_pqjobs_job_dashboard")).content.decode()
metrics = client.get("/metrics")
job_page = client.get(reverse("admin:django_pqjobs_job_change", args=[later[-1]]))
before_action = listed(client)
cancel = client.post(
    reverse("admin:django_pqjobs_job_changelist"),
    {"action": "cancel_action", "_selected_action": [later[0]]},
)
result = {
    "first": first,
    "later": later,
    "listed": before_action,
    "dashboard_ready": re.findall(r"<td>ready</td><td>(\d+)</td>", dashboard),
    "dashboard_replica": "Read from the replica <strong>replica</strong>" in dashboard,
    "metrics_status": metrics.status_code,
    "metrics": [
        line
        for line in metrics.content.decode().splitlines()
        if line.startswith(("pqjobs_jobs{", "pqjobs_read_lag_seconds"))
    ],
    "job_page": job_page.status_code,
    "cancel": cancel.status_code,
    "statuses_on_primary": dict(Job.objects.using("default").values_list("id", "status")),
}
replay(paused=False)
caught_up()
result["listed_after_replay"] = listed(client)
print(json.dumps(result, default=str))
