"""How NOTIFY wakes workers: one designated worker per notification, and polling on a short
interval instead of listening while a stream of enqueues lasts."""

from __future__ import annotations

import time

import pytest

from django_pqjobs import enqueue_job
from django_pqjobs.models import Job
from django_pqjobs.policies import make_delays
from tests.helpers import wait_for, wait_status

pytestmark = pytest.mark.django_db(transaction=True)

SLOW_POLL = make_delays([30], "poll")  # any job picked up quickly was woken by NOTIFY


def test_a_stream_of_enqueues_turns_listening_into_polling_and_back(worker_factory):
    worker = worker_factory(concurrency=2, queues=["stream"], poll_intervals=SLOW_POLL)
    assert worker.listener is not None
    streamed = False
    ids = []
    for _ in range(300):  # ~thousands a second: far above the stream threshold
        ids.append(enqueue_job("tests.noop", queue="stream"))
        streamed = streamed or worker._streaming
    assert streamed, "the worker never switched to polling"
    wait_for(lambda: Job.objects.filter(pk__in=ids, status="done").count() == len(ids))

    # the stream is over: after STREAM_IDLE the worker listens again...
    wait_for(lambda: not worker._streaming, timeout=5)
    wait_for(lambda: not worker.listener._pause, timeout=5)
    time.sleep(0.2)
    # ...so a lone job starts at once, long before the 30 s poll
    started = time.monotonic()
    wait_status(enqueue_job("tests.noop", queue="stream"), "done", timeout=5)
    assert time.monotonic() - started < 2


def test_each_notification_wakes_its_designated_worker_at_once(worker_factory):
    first = worker_factory(worker_id="wake-a", queues=["w"], poll_intervals=SLOW_POLL)
    second = worker_factory(worker_id="wake-b", queues=["w"], poll_intervals=SLOW_POLL)
    peers = [("wake-a", ["w"]), ("wake-b", ["w"])]
    first._set_peers(peers)
    second._set_peers(peers)
    for pid in (10, 11):  # whichever server process sends it, exactly one answers at once
        assert [first.answers_now("w", pid), second.answers_now("w", pid)].count(True) == 1
    assert first.answers_now("elsewhere", 10)  # nobody known serves that queue: answer
    # jobs enqueued one at a time are picked up well before any poll, by either worker
    for n in range(6):
        started = time.monotonic()
        wait_status(enqueue_job("tests.noop", {"n": n}, queue="w"), "done", timeout=5)
        assert time.monotonic() - started < 2
        time.sleep(0.05)
    ran_by = set(Job.objects.filter(queue="w").values_list("locked_by", flat=True))
    assert ran_by <= {"wake-a", "wake-b"}
