"""Names PostgreSQL cannot store (a NUL byte, a lone surrogate) given to pause, resume or
enqueue: refused before anything is written, with a message naming the problem; never a
database error, a 500 or a lost job (issue 40, leftovers)."""

from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command

from django_pqjobs import InvalidJobOption, enqueue_batch, enqueue_job, enqueue_many, flow
from django_pqjobs.models import Job, Pause

pytestmark = pytest.mark.django_db(transaction=True)

BAD = [("a\x00b", "NUL"), ("a\ud800b", "surrogate")]


@pytest.mark.parametrize(("name", "problem"), BAD)
@pytest.mark.parametrize(
    "call",
    [
        lambda name: flow.pause_queue(name),
        lambda name: flow.resume_queue(name),
        lambda name: flow.pause_job_type(name),
        lambda name: flow.resume_job_type(name),
        lambda name: flow.pause_queue("q", by=name),
        lambda name: enqueue_job("tests.noop", queue=name),
        lambda name: enqueue_many("tests.noop", [{}] * 2, queue=name),
        lambda name: enqueue_batch("tests.noop", [{}] * 2, queue=name),
        lambda name: enqueue_job(name),
        lambda name: enqueue_many(name, [{}]),
    ],
)
def test_a_name_postgres_cannot_store_is_refused_naming_the_problem(call, name, problem):
    with pytest.raises(InvalidJobOption) as caught:
        call(name)
    assert problem in str(caught.value), caught.value
    assert not Job.objects.exists() and not Pause.objects.exists()


@pytest.mark.parametrize(("name", "problem"), BAD)
@pytest.mark.parametrize(
    "command",
    [["pause_jobs", "--queue"], ["resume_jobs", "--queue"], ["pause_jobs", "--job-type"]],
)
def test_the_commands_refuse_such_a_name_naming_the_problem(command, name, problem):
    with pytest.raises(CommandError) as caught:
        call_command(*command, name)
    assert problem in str(caught.value), caught.value
    assert not Pause.objects.exists()
