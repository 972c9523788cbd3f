"""One job specification: every place that takes job options reads them from the one
declaration (``specification.OPTIONS``), and the SQL enqueue function refuses what Python
refuses, naming the same option."""

from __future__ import annotations

import math
from dataclasses import fields
from datetime import UTC, datetime
from typing import Any, get_type_hints

import psycopg
import pytest
from django.db import connection

from django_pqjobs import decorator, enqueue, registry, specification
from django_pqjobs.errors import InvalidJobOption
from django_pqjobs.models import Job
from django_pqjobs.tasks.options import BACKEND_OPTIONS, TaskOptions

pytestmark = pytest.mark.django_db(transaction=True)


def test_each_place_takes_exactly_the_options_declared_for_it():
    """The signatures themselves: tests/integration/test_option_set.py."""
    assert set(specification.names_at("call")) == set(get_type_hints(enqueue.EnqueueOptions))
    assert set(specification.names_at("task")) == {f.name for f in fields(TaskOptions)}
    assert set(BACKEND_OPTIONS.values()) == set(specification.names_at("task")) - {
        "dedupe_key",
        "fair_key",
    }
    # every declared option a type may set is a field of the registered JobType
    job_type_fields = set(registry.JobType.__dataclass_fields__)
    assert set(specification.names_at("type")) <= job_type_fields


def test_an_option_a_place_does_not_take_is_refused_by_name():
    with pytest.raises(InvalidJobOption, match=r"unknown option\(s\) concurrency; enqueue_job"):
        specification.declare("call", "job type 'x'", {"concurrency": 2})


def test_a_rule_is_the_same_wherever_the_values_come_from():
    """memory_limit without process isolation: on a type, and on a task."""
    with pytest.raises(InvalidJobOption, match="memory_limit needs isolation='process'"):
        decorator.job("tests.spec_rule", memory_limit="64M")
    with pytest.raises(InvalidJobOption, match="memory_limit needs isolation='process'"):
        TaskOptions(memory_limit=64 * 1024**2).check_combination("task 'x'")
    # the rule looks at the values that apply: isolation from the backend's defaults
    TaskOptions(memory_limit=64 * 1024**2).over(TaskOptions(isolation="process")).check_combination(
        "task 'x'"
    )


_SQL = (
    "SELECT pqjobs_enqueue(%(job_type)s, %(queue)s, '{}'::jsonb, %(priority)s::integer, "
    "%(max_attempts)s::integer, %(run_after)s::timestamptz, %(delay)s::double precision, "
    "%(timeout)s::double precision, %(dedupe_key)s::text, NULL, NULL, NULL, NULL, "
    "%(concurrency_key)s::text, %(concurrency_limit)s::integer, %(rate_key)s::text, "
    "%(rate_limit)s::integer, %(rate_period)s::double precision)"
)
_SQL_DEFAULTS: dict[str, Any] = {
    "job_type": "tests.echo",
    "queue": "default",
    "priority": 0,
    "max_attempts": 3,
    "run_after": None,
    "delay": 0.0,
    "timeout": None,
    "dedupe_key": None,
    "concurrency_key": None,
    "concurrency_limit": None,
    "rate_key": None,
    "rate_limit": None,
    "rate_period": None,
}
_PAST_9999 = datetime(9999, 12, 31, tzinfo=UTC)

# (option named in both errors, what enqueue_job is given, what pqjobs_enqueue is given)
BAD = [
    ("job_type", {"job_type": "  "}, {"job_type": "  "}),
    ("job_type", {"job_type": "a\x01b"}, {"job_type": "a\x01b"}),
    ("queue", {"queue": ""}, {"queue": ""}),
    ("queue", {"queue": "mail\x1b"}, {"queue": "mail\x1b"}),
    ("max_attempts", {"max_attempts": 0}, {"max_attempts": 0}),
    ("timeout", {"timeout": 0}, {"timeout": 0.0}),
    ("timeout", {"timeout": -5}, {"timeout": -5.0}),
    ("timeout", {"timeout": math.nan}, {"timeout": math.nan}),
    ("timeout", {"timeout": math.inf}, {"timeout": math.inf}),
    ("delay", {"delay": -1}, {"delay": -1.0}),
    ("delay", {"delay": math.nan}, {"delay": math.nan}),
    ("run_after", {"run_after": _PAST_9999}, {"run_after": _PAST_9999}),
    ("dedupe_key", {"dedupe_key": ""}, {"dedupe_key": ""}),
    (
        "concurrency_key",
        {"job_type": "tests.limited", "concurrency_key": "k\x07"},
        {"concurrency_key": "k\x07", "concurrency_limit": 1},
    ),
    ("concurrency_key", {"concurrency_key": "k"}, {"concurrency_key": "k"}),
]


def _python_refusal(given: dict[str, Any]) -> str:
    given = dict(given)
    job_type = given.pop("job_type", "tests.echo")
    with pytest.raises(InvalidJobOption) as refused:
        enqueue.enqueue_job(job_type, {}, **given)
    return str(refused.value)


def _sql_refusal(given: dict[str, Any]) -> str:
    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    with (
        psycopg.connect(**params, autocommit=True) as conn,
        pytest.raises(psycopg.errors.InvalidParameterValue) as refused,
    ):
        conn.execute(_SQL, {**_SQL_DEFAULTS, **given})
    return str(refused.value)


@pytest.mark.parametrize(
    ("option", "python", "sql"), BAD, ids=[f"{b[0]}-{n}" for n, b in enumerate(BAD)]
)
def test_python_and_sql_refuse_the_same_values_naming_the_option(option, python, sql):
    assert option in _python_refusal(python)
    assert option in _sql_refusal(sql)
    assert not Job.objects.exists()


@pytest.mark.parametrize(
    "sql",
    [
        {"concurrency_limit": 2},  # a limit without a key
        {"concurrency_key": "k", "concurrency_limit": 0},
        {"rate_key": "r", "rate_limit": 5},  # no period
        {"rate_key": "r", "rate_limit": 5, "rate_period": 0.0},
        {"rate_key": "r", "rate_limit": 0, "rate_period": 60.0},
        {"rate_key": "r", "rate_limit": 5, "rate_period": math.nan},
        {"delay": None},
    ],
)
def test_the_sql_function_refuses_flow_columns_python_derives(sql):
    """Python derives these columns from the type's declaration; an SQL caller writes them
    by hand and gets the same rules."""
    message = _sql_refusal(sql)
    assert message.startswith("pqjobs_enqueue: ")
    assert not Job.objects.exists()


def test_the_sql_function_still_enqueues_what_python_would():
    with connection.cursor() as cursor:
        cursor.execute(
            _SQL,
            {
                **_SQL_DEFAULTS,
                "timeout": 30.0,
                "delay": 5.0,
                "dedupe_key": "once",
                "concurrency_key": "k:1",
                "concurrency_limit": 2,
                "rate_key": "type:tests.echo",
                "rate_limit": 10,
                "rate_period": 60.0,
            },
        )
        (job_id,) = cursor.fetchone()
    job = Job.objects.get(pk=job_id)
    assert (job.timeout_seconds, job.dedupe_key, job.concurrency_limit, job.rate_period) == (
        30.0,
        "once",
        2,
        60.0,
    )
