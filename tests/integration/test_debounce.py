"""Debounce (issue 28): one pending job per key, pushed back by each duplicate, never past
its maximum wait; a duplicate that meets the job running is enqueued to run after it."""

from __future__ import annotations

import re
import time

import pytest
from django.db import connection

from django_pqjobs import InvalidJobOption, enqueue_job, enqueue_many
from django_pqjobs.models import Job, WorkerRecord
from django_pqjobs.worker.claiming import claim_jobs
from tests.helpers import run_jobs, wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def seconds_until(job_id: int) -> float:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT extract(epoch FROM run_after - now()) FROM pqjobs_job WHERE id = %s", [job_id]
        )
        return float(cursor.fetchone()[0])


def test_a_duplicate_takes_the_pending_job_s_place_and_pushes_it_back():
    first = enqueue_job("tests.echo", {"v": 1}, debounce="10s")
    assert 9 < seconds_until(first) <= 10  # the first enqueue waits the quiet time too
    Job.objects.filter(pk=first).update(run_after=Job.objects.get(pk=first).created_at)
    again = enqueue_job("tests.echo", {"v": 2}, debounce="10s")
    assert again == first
    job = Job.objects.get(pk=first)
    assert job.payload == {"v": 2} and job.dedupe_key == "debounce"
    assert 9 < seconds_until(first) <= 10
    assert Job.objects.count() == 1


def test_the_push_back_never_passes_the_maximum_wait():
    first = enqueue_job("tests.echo", {"v": 1}, debounce="10s", debounce_max="15s")
    with connection.cursor() as cursor:  # as if the first enqueue was 12 s ago
        cursor.execute(
            "UPDATE pqjobs_job SET created_at = now() - interval '12 seconds' WHERE id = %s",
            [first],
        )
    assert enqueue_job("tests.echo", {"v": 3}, debounce="10s", debounce_max="15s") == first
    assert 2 < seconds_until(first) <= 3  # created 12 s ago + at most 15 s


def test_a_duplicate_that_meets_the_job_running_is_enqueued_to_run_after_it():
    first = enqueue_job("tests.echo", {"v": 1}, debounce=0.01)
    time.sleep(0.05)
    (claimed,) = claim_jobs("default", "w1", None, 1).jobs
    assert claimed.id == first
    second = enqueue_job("tests.echo", {"v": 2}, debounce=0.01)
    assert second != first
    rows = dict(Job.objects.values_list("pk", "dedupe_key"))
    assert rows == {first: None, second: "debounce"}  # the running job let go of its key


def test_keys_by_fields_debounce_each_key_apart():
    a = enqueue_job("tests.echo", {"account": 1, "v": 1}, debounce="5s", unique_by=["account"])
    b = enqueue_job("tests.echo", {"account": 2, "v": 1}, debounce="5s", unique_by=["account"])
    assert a != b
    assert (
        enqueue_job("tests.echo", {"account": 1, "v": 2}, debounce="5s", unique_by=["account"]) == a
    )
    assert Job.objects.get(pk=a).payload == {"account": 1, "v": 2}


@pytest.mark.parametrize(
    ("given", "error"),
    [
        ({"debounce_max": "1m"}, "debounce_max needs a debounce"),
        ({"debounce": "1m", "debounce_max": "30s"}, "no longer than it"),
        ({"debounce": "1m", "delay": 5}, "give debounce or delay"),
        ({"debounce": "1m", "dedupe": "error"}, "cannot go with it"),
        ({"debounce": 0}, "debounce"),
        ({"debounce": "1m", "depends_on": [1]}, "depends_on cannot have a dedupe_key"),
    ],
)
def test_bad_debounce_options_are_refused(given, error):
    with pytest.raises(InvalidJobOption, match=re.escape(error)):
        enqueue_job("tests.echo", {}, **given)
    assert not Job.objects.exists()


def test_enqueue_many_refuses_a_debounced_type():
    with pytest.raises(InvalidJobOption, match="enqueue_many cannot apply"):
        enqueue_many("tests.debounced", [{"n": 1}])
    assert not Job.objects.exists()


@pytest.mark.slow
def test_a_stream_of_enqueues_runs_once_per_quiet_time_and_never_later_than_the_max_wait():
    """A duplicate every 50 ms for 3 s, debounce 0.4 s, at most 1.2 s: the stream never goes
    quiet, so the pending job runs when its maximum wait is up, with the newest payload;
    the next enqueue starts the next one. After the stream, the last runs 0.4 s later."""
    sent = 0
    # a pushed-back job becomes due by the clock, with no notification: the worker finds it
    # at its next idle poll, kept short here so the bound below measures the cap, not polling
    with run_jobs("--concurrency", "4", DJANGO_SETTINGS_MODULE="tests.settings_fast_poll"):
        wait_for(lambda: WorkerRecord.objects.exists())
        stop = time.monotonic() + 3
        while time.monotonic() < stop:
            sent += 1
            enqueue_job("tests.debounced", {"n": sent})  # debounce 0.4 s, at most 1.2 s
            time.sleep(0.05)
        wait_for(lambda: not Job.objects.exclude(status="done").exists())
    jobs = list(Job.objects.order_by("pk"))
    assert 2 <= len(jobs) <= 5, [j.payload for j in jobs]
    assert all(j.attempts == 1 for j in jobs)
    for job in jobs:
        waited = (job.locked_at - job.created_at).total_seconds()
        assert waited <= 1.2 + 1.0, (job.pk, waited)  # the cap, and a claim's reach
    assert jobs[-1].result["echo"] == {"n": sent}  # the last one ran with the newest payload
    seen = [j.result["echo"]["n"] for j in jobs]
    assert seen == sorted(seen)
