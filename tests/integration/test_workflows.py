"""Durable workflows (issue 30): steps recorded once and returned on every later run, durable
sleeps and waits for a signal that park the job (no worker, no connection, uncharged), and
signals sent before, during and after the wait, rolled back, or twice."""

from __future__ import annotations

import signal
import threading
import time

import pytest
from django.db import connection, transaction

from django_pqjobs import (
    InvalidJobOption,
    JobNotFound,
    enqueue_job,
    enqueue_many,
    send_signal,
    wait_for,
)
from django_pqjobs import transitions as _transitions
from django_pqjobs.models import Job, JobAttempt, Signal, Step
from django_pqjobs.testing import drain
from tests.helpers import bound, run_jobs
from tests.helpers import wait_for as wait_until
from tests.testapp.models import Counter

pytestmark = pytest.mark.django_db(transaction=True)

FAST_RESCUE = {"WORKER_STALE_TIMEOUT": "2", "WORKER_REAP_INTERVAL": "0.5"}


def counts(order: str) -> dict[str, int]:
    return {
        c.name.split(":", 1)[1]: c.value for c in Counter.objects.filter(name__startswith=order)
    }


def outcome(job_id: int) -> tuple[str, int]:
    job = Job.objects.get(pk=job_id)
    return job.status, job.attempts


def test_a_workflow_runs_each_step_once_through_a_sleep_and_a_signal():
    job_id = enqueue_job("tests.workflow", {"order": "o1"})
    (run,) = drain()
    assert run.outcome == "parked"  # charged and provisioned, then asleep
    assert outcome(job_id) == ("waiting", 0)  # no attempt charged
    assert counts("o1") == {"charge": 1, "provision": 1}
    assert Step.objects.get(job_id=job_id, name="cool-off").finished_at is None

    (run,) = drain(run_delayed=True)  # the sleep ends; now it waits for the signal
    assert run.outcome == "parked" and outcome(job_id) == ("waiting", 0)
    assert drain() == []  # nothing wakes it but its signal

    assert send_signal(job_id, "confirmed", {"by": "customer"}) is True
    assert Job.objects.get(pk=job_id).status == "ready"
    (run,) = drain()
    assert run.outcome == "done"
    assert counts("o1") == {"charge": 1, "provision": 1, "email": 1}
    assert wait_for(job_id, timeout=bound()) == {
        "charged": 1,
        "reply": {"by": "customer"},
        "emailed": 1,
    }
    kinds = list(Step.objects.filter(job_id=job_id).values_list("name", "kind"))
    assert kinds == [
        ("charge", "step"),
        ("provision", "step"),
        ("cool-off", "sleep"),
        ("confirmed", "signal"),
        ("email", "step"),
    ]
    assert set(JobAttempt.objects.filter(job_id=job_id).values_list("outcome", flat=True)) == {
        "parked"
    }


def test_a_signal_sent_before_the_wait_is_kept():
    job_id = enqueue_job("tests.workflow", {"order": "o2", "sleep": 0})
    assert send_signal(job_id, "confirmed", "early") is True
    runs = drain(run_delayed=True)
    assert [r.outcome for r in runs] == ["parked", "done"]  # the sleep of 0 s parks once
    assert wait_for(job_id, timeout=bound())["reply"] == "early"


def test_a_rolled_back_signal_was_never_sent_and_a_second_one_changes_nothing():
    job_id = enqueue_job("tests.workflow", {"order": "o3", "sleep": 0})
    drain(run_delayed=True)
    assert outcome(job_id) == ("waiting", 0)

    class Undo(Exception):
        pass

    with pytest.raises(Undo), transaction.atomic():
        assert send_signal(job_id, "confirmed", "rolled back") is True
        raise Undo
    assert not Signal.objects.exists() and outcome(job_id) == ("waiting", 0)
    assert send_signal(job_id, "confirmed", "first") is True
    assert send_signal(job_id, "confirmed", "second") is False
    drain()
    assert wait_for(job_id, timeout=bound())["reply"] == "first"
    assert send_signal(job_id, "confirmed", "after the end") is False  # already had it


def test_a_wait_times_out_in_the_handler_and_stays_timed_out():
    job_id = enqueue_job("tests.workflow_timeout", {"timeout": 0.3})
    (run,) = drain()
    assert run.outcome == "parked"
    time.sleep(0.4)
    (run,) = drain()  # woken by its timeout
    assert run.outcome == "done" and wait_for(job_id, timeout=bound()) == "timed out"
    # a signal after the timeout is kept but changes no result
    assert send_signal(job_id, "answer", 42) is True
    assert drain() == []


def test_a_signal_that_comes_in_time_is_returned():
    job_id = enqueue_job("tests.workflow_timeout", {"timeout": 3600})
    drain()
    send_signal(job_id, "answer", [1, 2])
    drain()
    assert wait_for(job_id, timeout=bound()) == "got [1, 2]"


def test_an_operator_ends_a_wait_early():
    sleeper = enqueue_job("tests.workflow", {"order": "o4"})
    waiter = enqueue_job("tests.workflow_timeout", {"timeout": 3600})
    drain()
    with connection.cursor() as cursor:
        assert _transitions.end_wait(cursor, sleeper) == ("default", [("cool-off", "sleep")])
        assert _transitions.end_wait(cursor, waiter) == ("default", [("answer", "signal")])
        assert _transitions.end_wait(cursor, waiter) is None  # not parked any more
    runs = {r.job_id: r.outcome for r in drain()}
    assert runs == {sleeper: "parked", waiter: "done"}  # the sleeper now waits for its signal
    assert wait_for(waiter, timeout=bound()) == "timed out"
    assert Step.objects.get(job_id=sleeper, name="cool-off").finished_at is not None


@pytest.mark.parametrize(
    ("job_type", "message"),
    [
        ("tests.workflow_twice", "the step name 'same' is used twice"),
        ("tests.workflow_bad_result", "StepResultNotSerializable"),
        ("tests.workflow_atomic", "durable workflows need a job that is not atomic=True"),
    ],
)
def test_misuse_fails_the_job_for_good_saying_why(job_type, message):
    job_id = enqueue_job(job_type)
    (run,) = drain()
    job = Job.objects.get(pk=job_id)
    assert (run.outcome, job.attempts) == ("failed", 1)
    assert message in f"{job.error_type}: {job.last_error}"


def test_send_signal_refuses_what_it_cannot_deliver():
    with pytest.raises(JobNotFound):
        send_signal(999_999, "x")
    job_id = enqueue_job("tests.noop")
    with pytest.raises(InvalidJobOption, match="signal name"):
        send_signal(job_id, "")
    assert not Signal.objects.exists()


def test_deleting_and_pruning_take_steps_and_signals_along():
    from django_pqjobs import operations

    job_id = enqueue_job("tests.workflow", {"order": "o5"})
    drain()
    send_signal(job_id, "confirmed", 1)
    operations.delete_jobs([job_id])
    assert not Job.objects.exists() and not Step.objects.exists() and not Signal.objects.exists()


# --- with real workers ----------------------------------------------------------------------


@pytest.mark.parametrize("die_after", ["charge", "provision", "cool-off", "confirmed"])
@pytest.mark.slow
def test_kill_9_after_each_step_runs_every_step_once(die_after):
    order = f"k-{die_after}"
    job_id = enqueue_job("tests.workflow", {"order": order, "sleep": 0.2, "die_after": die_after})
    send_signal(job_id, "confirmed", "yes")  # sent up front: kept for the wait
    with run_jobs("-c", "2", "--worker-id", "doomed", **FAST_RESCUE) as doomed:
        assert doomed.wait(60) == -signal.SIGKILL  # the handler killed its worker
    with run_jobs("-c", "2", "--worker-id", "rescuer", **FAST_RESCUE):
        wait_until(lambda: Job.objects.get(pk=job_id).status == "done")
    assert counts(order) == {"charge": 1, "provision": 1, "email": 1}
    assert wait_for(job_id, timeout=bound()) == {"charged": 1, "reply": "yes", "emailed": 1}


@pytest.mark.slow
def test_a_sleep_holds_no_worker_and_resumes_across_a_restart():
    job_id = enqueue_job("tests.workflow", {"order": "r1", "sleep": 3})
    send_signal(job_id, "confirmed", "ok")
    with run_jobs("-c", "2") as worker:
        wait_until(lambda: Job.objects.get(pk=job_id).status == "waiting")
        assert not Job.objects.filter(status="running").exists()  # parked: no worker held
    assert counts("r1") == {"charge": 1, "provision": 1}
    time.sleep(3)
    with run_jobs("-c", "2"):
        wait_until(lambda: Job.objects.get(pk=job_id).status == "done")
    assert counts("r1") == {"charge": 1, "provision": 1, "email": 1}
    assert worker.process.returncode is not None


@pytest.mark.slow
def test_a_thousand_parked_workflows_woken_by_a_thousand_signals():
    """Signals race the parks (sent from four threads while the worker parks the jobs): no
    wake-up is lost, each job gets its own payload."""
    total = 1000
    ids = enqueue_many("tests.workflow_timeout", [{"timeout": None}] * total)
    errors: list[BaseException] = []

    def send(part: list[int]) -> None:
        try:
            for job_id in part:
                send_signal(job_id, "answer", job_id)
        except BaseException as exc:  # reported below
            errors.append(exc)
        finally:
            connection.close()

    with run_jobs("-c", "4", "-v", "0"):
        wait_until(lambda: Job.objects.filter(status="waiting").count() > total // 10)
        threads = [threading.Thread(target=send, args=(ids[k::4],)) for k in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(bound(120))
        wait_until(lambda: Job.objects.filter(status="done").count() == total, timeout=120)
    assert errors == []
    results = dict(Job.objects.values_list("id", "result"))
    assert results == {job_id: f"got {job_id}" for job_id in ids}


@pytest.mark.slow
def test_steps_and_sleeps_in_a_child_process():
    job_id = enqueue_job("tests.workflow_isolated")
    with run_jobs("-c", "1"):
        wait_until(lambda: Job.objects.get(pk=job_id).status == "waiting")
    Job.objects.filter(pk=job_id).update(run_after=Job.objects.get(pk=job_id).created_at)
    Step.objects.filter(job_id=job_id, name="nap").update(
        wake_at=Job.objects.get(pk=job_id).created_at
    )
    with run_jobs("-c", "1"):
        wait_until(lambda: Job.objects.get(pk=job_id).status == "done")
    assert wait_for(job_id, timeout=bound()) == {"first": 1}
    assert Counter.objects.get(name=f"iso-wf:{job_id}").value == 1


# --- the operator's view --------------------------------------------------------------------


def test_the_job_page_shows_the_steps_and_the_wait_and_acts_on_it():
    from django_pqjobs.models import OperatorAction
    from tests.helpers import make_user

    job_id = enqueue_job("tests.workflow", {"order": "a1", "password": "hunter2"})
    drain()
    url = f"/admin/django_pqjobs/job/{job_id}/change/"
    viewer = make_user("viewer", "view_job")
    page = viewer.get(url).content.decode()
    assert "sleeping (cool-off) until" in page  # why it waits
    assert "charge" in page and "provision" in page and "Workflow" in page
    assert "End wait" not in page  # a viewer cannot act
    operator = make_user("operator", "view_job", "change_job")
    assert "End wait" in operator.get(url).content.decode()
    response = operator.post(f"/admin/django_pqjobs/job/{job_id}/action/end-wait/")
    assert response.status_code == 302 and Job.objects.get(pk=job_id).status == "ready"
    drain()  # the sleep is over: now it waits for its signal
    page = operator.get(url).content.decode()
    assert "waiting for the signal confirmed" in page and "Send signal" in page
    form = operator.get(f"/admin/django_pqjobs/job/{job_id}/signal/").content.decode()
    assert "It waits for the signal <strong>confirmed</strong>" in form
    bad = operator.post(
        f"/admin/django_pqjobs/job/{job_id}/signal/", {"name": "confirmed", "payload": "{oops"}
    )
    assert bad.status_code == 200 and "not JSON" in bad.content.decode()
    sent = operator.post(
        f"/admin/django_pqjobs/job/{job_id}/signal/",
        {"name": "confirmed", "payload": '{"ok": true}'},
    )
    assert sent.status_code == 302 and Job.objects.get(pk=job_id).status == "ready"
    drain()
    assert wait_for(job_id, timeout=bound())["reply"] == {"ok": True}
    actions = list(OperatorAction.objects.order_by("id").values_list("action", "actor", "detail"))
    assert actions == [
        ("end_wait", "operator", "waiting → ready; ended: sleep 'cool-off'"),
        ("signal", "operator", "'confirmed'; the job was waiting for it: ready"),
    ]


# --- a task of Django's Tasks framework -----------------------------------------------------


def _fulfil(order: str) -> dict:
    from django_pqjobs import job_context
    from tests.testapp.jobs import _count

    ctx = job_context()
    charged = ctx.step("charge", _count, f"{order}:charge")
    ctx.sleep("cool-off", 3600)
    return {"charged": charged, "reply": ctx.wait_for_signal("ok")}


def fulfil_builtin(order: str) -> dict:
    return _fulfil(order)


def fulfil_backport(order: str) -> dict:
    return _fulfil(order)


def test_a_task_of_the_tasks_framework_is_a_durable_workflow(tasks):
    from .tasks_apps import framework

    suffix = "builtin" if tasks.FAMILY == "django.tasks" else "backport"
    fulfil = framework(tasks.FAMILY).task()(globals()[f"fulfil_{suffix}"])
    result = fulfil.enqueue(f"t-{suffix}")
    job_id = int(result.id)
    assert [r.outcome for r in drain(run_delayed=True)] == ["parked", "parked"]
    assert fulfil.get_result(result.id).status.name == "READY"  # parked: not finished
    send_signal(job_id, "ok", "go")
    drain()
    finished = fulfil.get_result(result.id)
    assert finished.status.name == "SUCCESSFUL"
    assert finished.return_value == {"charged": 1, "reply": "go"}
    assert counts(f"t-{suffix}") == {"charge": 1}


# --- the guide ------------------------------------------------------------------------------


def test_the_guides_order_workflow_runs_as_written():
    from django_pqjobs.registry import registry
    from tests.helpers import documented_block

    namespace: dict = {}
    code = documented_block("guides/workflows.md", "order-workflow", "python")
    exec(compile(code, "workflows.md", "exec", dont_inherit=True), namespace)
    sent = namespace["SENT"]
    try:
        confirmed = enqueue_job("shop.fulfil_order", {"order_id": 1, "cents": 1999})
        forgotten = enqueue_job("shop.fulfil_order", {"order_id": 2, "cents": 500})
        assert [r.outcome for r in drain()] == ["parked", "parked"]  # both wait for delivery
        send_signal(confirmed, "delivered", {"confirmed": True})
        drain()
        assert wait_for(confirmed, timeout=bound()) == {
            "charge": "ch_1",
            "tracking": "TRACK-1",
            "confirmed": True,
        }
        # no word from the second customer: the week passes (an operator ends the wait)
        from django_pqjobs import operations

        assert operations.end_waits([forgotten]) == [forgotten]
        assert [r.outcome for r in drain()] == ["parked"]  # reminded, now the grace sleep
        drain(run_delayed=True)
        assert wait_for(forgotten, timeout=bound())["confirmed"] is False
        assert sent == [
            "charge 1",
            "ship 1",
            "mail 1: shipped, tracking TRACK-1",
            "charge 2",
            "ship 2",
            "mail 2: shipped, tracking TRACK-2",
            "mail 1: thank you",
            "mail 2: did your parcel arrive?",
            "mail 2: thank you",
        ]
    finally:
        registry.unregister("shop.fulfil_order")


def test_child_jobs_are_enqueued_once_and_awaited_parked():
    parent = enqueue_job("tests.workflow_parent")
    runs = drain()
    # the parent enqueued its first child and parked; the child ran; the sweep woke the
    # parent, which enqueued the second child and parked; that one failed; the parent woke
    # again and finished
    assert [(r.job_type, r.outcome) for r in runs] == [
        ("tests.workflow_parent", "parked"),
        ("tests.echo", "done"),
        ("tests.workflow_parent", "parked"),
        ("tests.permanent", "failed"),
        ("tests.workflow_parent", "done"),
    ]
    doomed = Job.objects.get(parent_id=parent, job_type="tests.permanent")
    assert doomed.last_error.startswith("Traceback (most recent call last)")
    # the parent is told the child's error and id, not its whole traceback
    assert wait_for(parent, timeout=bound()) == {
        "echoed": {"echo": {"n": 21}, "attempt": 1, "worker": "pqjobs-testing"},
        "failed": {
            "type": "PermanentError",
            "error": "this will never work",
            "job": doomed.pk,
            "says": f"job #{doomed.pk} failed (PermanentError: this will never work)",
        },
    }
    [recorded] = Step.objects.filter(job_id=parent, name="doomed").values_list("result", flat=True)
    assert recorded["error"] == "this will never work"  # nor is the traceback recorded
    assert Job.objects.filter(parent_id=parent).count() == 2  # each child enqueued once
    assert set(Step.objects.filter(job_id=parent).values_list("kind", flat=True)) == {"child"}


def test_step_results_on_the_job_page_are_masked_as_payloads_are():
    from tests.helpers import make_user

    job_id = enqueue_job("tests.noop")
    Step.objects.create(
        job_id=job_id, name="login", kind="step", attempt=1, result={"token": "tok-abc-123"}
    )
    url = f"/admin/django_pqjobs/job/{job_id}/change/"
    viewer = make_user("viewer", "view_job").get(url).content.decode()
    assert "login" in viewer and "tok-abc-123" not in viewer and "[redacted]" in viewer
    trusted = make_user("trusted", "view_job", "view_job_secrets").get(url).content.decode()
    assert "tok-abc-123" in trusted
