"""Task jobs in the operator console: the task's name in the list, its call on the job page
(the list reads no payloads), and Retry / Cancel / Run now acting on them (seen through the
framework's get_result)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from django_pqjobs.models import Job

from .test_admin import CHANGELIST, action_url, bulk, change_url, messages_of, operator  # noqa: F401

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_list_shows_the_task_and_the_job_page_its_call_escaped(tasks, operator):  # noqa: F811
    result = tasks.record.enqueue("<script>alert(1)</script>", payload={"n": [1, 2]})
    native = Job.objects.create(job_type="native.type", payload={"args": [1]})

    page = operator.get(CHANGELIST).content.decode()
    assert f"{tasks.__name__}.record" in page
    assert "<script>alert(1)" not in page
    call = (
        "record(&quot;&lt;script&gt;alert(1)&lt;/script&gt;&quot;, payload={&quot;n&quot;: [1, 2]})"
    )

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
