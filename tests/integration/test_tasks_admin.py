"""Task jobs in the operator console: the task's name in the list, its call on the job page
(the list reads no payloads), and Retry / Cancel / Run now acting on them (seen through the
framework's get_result)."""

from __future__ import annotations

import os
import re
from datetime import timedelta

import pytest
from django.utils import timezone

from django_pqjobs.models import Job

from .test_admin import CHANGELIST, action_url, bulk, change_url, messages_of, operator  # noqa: F401

pytestmark = pytest.mark.django_db(transaction=True)


def job_type_cells(page: str) -> dict[str, str]:
    """The list's job type cells by job id, as text: their lines joined by " | "."""
    rows = re.findall(
        r'<th class="field-id"><a [^>]*>(\d+)</a></th><td class="field-job_type_cell">(.*?)</td>',
        page,
        re.S,
    )
    return {
        int(job_id): " | ".join(
            text
            for text in (re.sub(r"<[^>]+>", "", part) for part in re.split(r"<span[^>]*>", cell))
            if text
        )
        for job_id, cell in rows
    }


def test_the_list_shows_the_task_and_the_job_page_its_call_escaped(tasks, operator):  # noqa: F811
    result = tasks.record.enqueue("<script>alert(1)</script>", payload={"n": [1, 2]})
    native = Job.objects.create(job_type="native.type", payload={"args": [1]})

    page = operator.get(CHANGELIST).content.decode()
    call = (
        "record(&quot;&lt;script&gt;alert(1)&lt;/script&gt;&quot;, payload={&quot;n&quot;: [1, 2]})"
    )
    # the task's path as its job type, its call under it, then the queue (the guide's words)
    cells = job_type_cells(page)
    assert cells[int(result.id)] == f"{tasks.__name__}.record | {call} | emails"
    assert cells[native.pk] == "native.type | default"
    assert "<script>alert(1)" not in page

    job_page = operator.get(change_url(int(result.id))).content.decode()
    assert f"Task call: <code>{call}</code>" in job_page
    assert "Task call" not in operator.get(change_url(native.pk)).content.decode()


def test_retry_cancel_and_run_now_act_on_task_jobs(tasks, operator):  # noqa: F811
    failed = tasks.boom.enqueue("x")
    Job.objects.filter(pk=int(failed.id)).update(status="failed", attempts=1, last_error="boom")
    ready = tasks.add.enqueue(1, 2)
    later = tasks.add.using(run_after=timezone.now() + timedelta(hours=1)).enqueue(3, 4)

    assert messages_of(operator.post(action_url(int(failed.id), "retry"), follow=True)) == [
        f"Job {failed.id} retried: it was put back to ready. Its status and timeline below "
        "show what has happened to it since."
    ]
    failed.refresh()
    assert str(failed.status) == "READY"

    bulk(operator, "cancel_action", [int(ready.id)])
    ready.refresh()
    assert str(ready.status) == "FAILED"
    assert [e.exception_class_path for e in ready.errors] == ["django_pqjobs.errors.JobCancelled"]

    bulk(operator, "run_now_action", [int(later.id)])
    assert Job.objects.get(pk=int(later.id)).run_after <= timezone.now()


def test_the_list_reads_no_big_payload_for_a_call(tasks, operator):  # noqa: F811
    """A task whose payload is stored in more than TASK_CALL_BYTES is listed by its path
    alone: the list never reads a big payload (the job page shows its call)."""
    small = tasks.record.enqueue("small")
    big = tasks.record.enqueue("big", payload={"blob": os.urandom(4000).hex()})
    cells = job_type_cells(operator.get(CHANGELIST).content.decode())
    assert cells[int(small.id)] == (f"{tasks.__name__}.record | record(&quot;small&quot;) | emails")
    assert cells[int(big.id)] == f"{tasks.__name__}.record | emails"


def test_without_the_data_permission_the_list_shows_no_call(tasks, operator, settings):  # noqa: F811
    settings.PQJOBS = {**settings.PQJOBS, "ADMIN_DATA_PERMISSION": "django_pqjobs.delete_job"}
    result = tasks.record.enqueue("private")
    cells = job_type_cells(operator.get(CHANGELIST).content.decode())
    assert cells[int(result.id)] == f"{tasks.__name__}.record | emails"


def test_the_queue_filter_offers_the_queues_of_tasks(operator, settings):  # noqa: F811
    """Named in TASKS[...]["QUEUES"] of this backend, whether or not a job is there yet;
    another backend's queues are not offered."""
    settings.TASKS = {
        **settings.TASKS,
        "reports": {
            "BACKEND": "django_pqjobs.tasks.PQJobsBackend",
            "QUEUES": ["nightly-reports"],
        },
        "elsewhere": {
            "BACKEND": "django_tasks.backends.immediate.ImmediateBackend",
            "QUEUES": ["not-ours"],
        },
    }
    page = operator.get(CHANGELIST).content.decode()
    assert '<a href="?queue=nightly-reports">nightly-reports</a>' in page
    assert "not-ours" not in page
    filtered = operator.get(f"{CHANGELIST}?queue=nightly-reports")
    assert filtered.status_code == 200
    chosen = r'<li class="selected">\s*<a href="\?queue=nightly-reports">nightly-reports</a>'
    assert re.search(chosen, filtered.content.decode())
