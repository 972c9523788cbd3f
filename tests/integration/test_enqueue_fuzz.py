"""Fuzzing enqueue: whatever a caller passes is either stored (and a worker can claim and
read it back as given) or refused with our own error, never a database error."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import pytest
from django.db.models.expressions import RawSQL
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from django_pqjobs import InvalidJobOption, PayloadError, enqueue_job, enqueue_many
from django_pqjobs.models import Job
from django_pqjobs.worker.claiming import claim_jobs

pytestmark = pytest.mark.django_db

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=30)
)
json_like = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=25,
)
# names include NUL, surrogates, control characters and lengths past every column
names = st.text(max_size=220) | st.sampled_from(["", " ", "a\x00b", "q" * 101, "\udc80"])
offsets = st.integers(min_value=-14 * 60, max_value=14 * 60).map(
    lambda minutes: timezone(timedelta(minutes=minutes))
)
moments = st.builds(
    lambda dt, tz: dt.replace(tzinfo=tz),
    st.datetimes(min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31)),
    offsets,
)
delays = st.none() | st.floats(allow_nan=True, allow_infinity=True) | st.integers(-5, 10**12)
FUZZ = settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def canonical(value: Any) -> Any:
    """Numbers compared by value: jsonb keeps 1e308 as digits, which Python reads as int."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int | float):
        return Decimal(repr(value)) if isinstance(value, float) else Decimal(value)
    if isinstance(value, list):
        return [canonical(v) for v in value]
    return {k: canonical(v) for k, v in value.items()}


def claim_back(job_id: int) -> Job:
    """Make the job due, claim it like a worker does, and forget it afterwards."""
    Job.objects.exclude(pk=job_id).delete()
    # now() of the test's transaction: the clock the claim compares with (Django's Now()
    # is the statement's time, later than that inside one long transaction)
    Job.objects.filter(pk=job_id).update(run_after=RawSQL("now() - interval '1 second'", []))
    batch = claim_jobs("default", "fuzz", None, 10)
    assert not batch.undecodable, batch.undecodable
    (job,) = batch.jobs
    Job.objects.filter(pk=job_id).delete()
    return job


@FUZZ
@given(
    payload=json_like,
    job_type=names,
    queue=st.none() | names,
    priority=st.none() | st.integers(min_value=-(2**40), max_value=2**40),
    delay=delays,
    run_after=st.none() | moments,
    dedupe_key=st.none() | st.text(max_size=300),
)
def test_enqueue_job_stores_what_it_accepts_and_refuses_the_rest_with_its_own_error(
    payload, job_type, queue, priority, delay, run_after, dedupe_key
):
    try:
        job_id = enqueue_job(
            job_type,
            payload,
            queue=queue,
            priority=priority,
            delay=delay,
            run_after=run_after,
            dedupe_key=dedupe_key,
        )
    except (PayloadError, InvalidJobOption):
        return
    job = claim_back(job_id)
    assert job.job_type == job_type
    assert canonical(job.payload) == canonical(
        json.loads(json.dumps({} if payload is None else payload))
    )


@FUZZ
@given(
    payloads=st.lists(json_like, min_size=1, max_size=5),
    job_type=names,
    keys=st.none() | st.lists(st.none() | st.text(max_size=300), min_size=5, max_size=5),
)
def test_enqueue_many_stores_what_it_accepts_and_refuses_the_rest_with_its_own_error(
    payloads, job_type, keys
):
    dedupe_keys = None if keys is None else keys[: len(payloads)]
    try:
        ids = enqueue_many(job_type, payloads, dedupe_keys=dedupe_keys)
    except (PayloadError, InvalidJobOption):
        assert not Job.objects.exists()  # all or nothing
        return
    for job_id in set(ids):
        claimed = Job.objects.get(pk=job_id)
        assert claimed.job_type == job_type
    Job.objects.all().delete()
