"""Composition with Django's Tasks framework: tasks join batches, a task can be a batch's
callback, and wait_for() takes a task result's id."""

from __future__ import annotations

import pytest

from django_pqjobs import batch, wait_for
from django_pqjobs.errors import InvalidJobOption
from django_pqjobs.models import Job
from django_pqjobs.testing import drain
from tests.helpers import bound
from tests.testapp.models import Effect

pytestmark = pytest.mark.django_db(transaction=True)


def test_tasks_join_a_batch_and_a_task_is_its_callback(tasks):
    with batch(on_success=tasks.batch_done, callback_payload={"key": "sums"}) as b:
        first = tasks.add.enqueue(1, 2)
        second = tasks.add.enqueue(3, 4)
    assert b.job_ids == [int(first.id), int(second.id)]
    drain()
    drain()
    assert Effect.objects.filter(key=f"sums:{b.id}").count() == 1
    callback = Job.objects.get(callback_of_id=b.id)
    assert callback.job_type == f"{tasks.__name__}.batch_done"
    assert callback.result == b.id
    assert wait_for(int(first.id), timeout=bound()) == 3
    assert first.backend == "default"


def test_a_task_callback_takes_keyword_arguments_only(tasks):
    with (
        pytest.raises(InvalidJobOption, match="keyword arguments"),
        batch(on_success=tasks.batch_done, callback_payload=["sums"]),
    ):
        pass
    assert not Job.objects.exists()
