"""The Tasks framework backend's parts that need no database: error class paths, the payload
format, JSON round-trips, options, stored-path rules, which framework a backend serves."""

from __future__ import annotations

import importlib
import logging

import pytest
from django.conf import settings
from django.test import override_settings
from django.utils.module_loading import import_string

from django_pqjobs import InvalidJobOption
from django_pqjobs.tasks import TaskNotLoadable, TaskReturnValueError, families, loader, payload
from django_pqjobs.tasks.arguments import normalize_arguments, normalize_return_value
from django_pqjobs.tasks.options import TaskOptions, parse_backend_options, parse_options
from django_pqjobs.tasks.results import exception_class_path


@pytest.mark.parametrize(
    ("recorded", "path"),
    [
        ("ValueError", "builtins.ValueError"),
        ("KeyboardInterrupt", "builtins.KeyboardInterrupt"),
        ("JobTimeout", "django_pqjobs.errors.JobTimeout"),
        ("Retry", "django_pqjobs.errors.Retry"),
        ("JobCancelled", "django_pqjobs.errors.JobCancelled"),
        ("PermanentError", "django_pqjobs.errors.PermanentError"),
        ("TaskNotLoadable", "django_pqjobs.tasks.errors.TaskNotLoadable"),
        ("TaskReturnValueError", "django_pqjobs.tasks.errors.TaskReturnValueError"),
        ("ResultNotSerializable", "django_pqjobs.verdicts.ResultNotSerializable"),
        ("ResultNotStorable", "django_pqjobs.tasks.errors.ResultNotStorable"),
        ("UndecodableJob", "django_pqjobs.tasks.errors.UndecodableJob"),
        ("WorkerLostBeforeStart", "django_pqjobs.tasks.errors.WorkerLostBeforeStart"),
        ("WorkerLost", "django_pqjobs.tasks.errors.WorkerLost"),
        ("UnknownJobType", "django_pqjobs.tasks.errors.UnknownJobType"),
        ("ChildKilled", "django_pqjobs.tasks.errors.ChildKilled"),
        ("ChildCrashed(SIGSEGV)", "django_pqjobs.tasks.errors.ChildCrashed"),
        ("ChildExited", "django_pqjobs.tasks.errors.ChildExited"),
        ("decimal.InvalidOperation", "decimal.InvalidOperation"),
    ],
)
def test_recorded_error_types_map_to_importable_exception_classes(recorded, path):
    assert exception_class_path(recorded) == path
    found = import_string(path)
    assert isinstance(found, type) and issubclass(found, BaseException)


def test_an_unknown_bare_error_name_maps_to_exception():
    assert exception_class_path("SomethingElse") == "builtins.Exception"


def test_payload_marks_task_calls_and_describes_them():
    stored = payload.build("default", [1, "a"], {"to": "x@example.com", "n": None})
    assert payload.is_task_payload(stored)
    assert payload.unpack(stored) == ("default", [1, "a"], {"to": "x@example.com", "n": None})
    assert payload.describe_call("app.tasks.send", stored) == (
        'send(1, "a", to="x@example.com", n=null)'
    )
    long_call = payload.describe_call("a.b", payload.build("d", ["x" * 500], {}), limit=50)
    assert long_call is not None and len(long_call) == 50 and long_call.endswith("…")
    for native in ({}, {"args": [], "kwargs": {}}, {"args": {}, "kwargs": {}, "task_backend": "d"}):
        assert not payload.is_task_payload(native)
        assert payload.describe_call("a.b", native) is None
        with pytest.raises(ValueError, match="not a task call"):
            payload.unpack(native)


def test_arguments_come_back_as_json_would_return_them():
    args, kwargs = normalize_arguments("t", (1, (2, 3), [True, None]), {"m": {"k": 1.5}})
    assert args == [1, [2, 3], [True, None]]
    assert kwargs == {"m": {"k": 1.5}}
    with pytest.raises(TypeError, match=r"argument args\[0\] is nested more than 100 levels"):
        nested: list = []
        for _ in range(150):
            nested = [nested]
        normalize_arguments("t", (nested,), {})


def test_return_values_must_round_trip_through_json():
    assert normalize_return_value("t", ("a", 1)) == ["a", 1]
    with pytest.raises(TaskReturnValueError, match=r"task 't' returned .* at the return value\["):
        normalize_return_value("t", {"when": object()})
    with pytest.raises(TaskReturnValueError, match="it is a set"):
        normalize_return_value("t", {1})


def test_options_parse_validate_and_layer():
    options = parse_options({"max_attempts": 3, "timeout": 2.5, "isolation": "process"}, "w")
    assert options == TaskOptions(max_attempts=3, timeout=2.5, isolation="process")
    assert parse_options({"memory_limit": "64M"}, "w").memory_limit == 64 * 1024**2
    layered = TaskOptions(timeout=1).over(TaskOptions(max_attempts=2, timeout=9))
    assert (layered.max_attempts, layered.timeout) == (2, 1)
    with pytest.raises(InvalidJobOption, match="dedupe_key must be a string of 1-255"):
        parse_options({"dedupe_key": ""}, "w")
    with pytest.raises(InvalidJobOption, match="dedupe must be one of"):
        parse_options({"dedupe": "merge"}, "w")
    assert parse_backend_options({}, "default") == TaskOptions()
    with pytest.raises(InvalidJobOption, match=r"TASKS\['x'\]\['OPTIONS'\] must be a dict"):
        parse_backend_options(["MAX_ATTEMPTS"], "x")
    with pytest.raises(InvalidJobOption, match=r"\['BACKOFF'\] must be 'default'"):
        parse_backend_options({"BACKOFF": 5}, "x")
    with pytest.raises(InvalidJobOption, match="memory_limit needs isolation='process'"):
        parse_backend_options({"MEMORY_LIMIT": "64M"}, "x")


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("tests.testapp.jobs.noop", ("tests.testapp.jobs", "noop")),
        ("tests.testapp.lookalikes.plain_function", ("tests.testapp.lookalikes", "plain_function")),
        ("shop.jobs.send", ("shop.jobs", "send")),
        ("os.system", None),
        ("tests.outside_apps.side_effect.run", None),
        ("django_pqjobs.enqueue.enqueue_job", None),
        ("tests.testapp", None),
        ("summarize", None),
        ("tests.testapp..x", None),
        ("tests.testapp.jobs.x-y", None),
        ("tests.testapp.jobs.x; import os", None),
    ],
)
def test_stored_paths_are_only_module_paths_inside_installed_apps(name, expected):
    assert loader.split_path(name) == expected


def test_a_task_of_another_backend_is_not_loaded(monkeypatch):
    family = _a_family()
    framework = importlib.import_module(family.name)
    dummy = f"{family.name}.backends.dummy.DummyBackend"
    lookalikes = importlib.import_module("tests.testapp.lookalikes")
    with override_settings(TASKS={**settings.TASKS, "dummy": {"BACKEND": dummy}}):
        other = framework.task(backend="dummy")(lookalikes.plain_function)
        monkeypatch.setattr(lookalikes, "plain_function", other)
        with pytest.raises(TaskNotLoadable, match="is a task of backend 'dummy'"):
            loader.load_task("tests.testapp.lookalikes.plain_function")


def test_a_backend_made_outside_a_handler_serves_the_first_framework_installed():
    from django_pqjobs.tasks import PQJobsBackend

    family = _a_family()
    backend = PQJobsBackend("default", {"QUEUES": ["a"], "OPTIONS": {"TIMEOUT": 5}})
    assert backend.family is families.installed()[0]
    assert backend.queues == {"a"}
    assert backend.defaults.timeout == 5
    assert isinstance(backend, family.base_backend)
    for each in families.installed():
        assert isinstance(backend, each.base_backend)  # one class serves both frameworks
    assert (
        backend.supports_defer
        and backend.supports_async_task
        and backend.supports_get_result
        and backend.supports_priority
    )


def test_each_handler_gets_a_backend_of_its_own_framework():
    found = families.installed()
    if not found:
        pytest.skip("no Tasks framework installed")
    for family in found:
        backend = family.handler["default"]
        assert backend.family is family
        assert backend.task_class.__mro__[1] is family.task


def _a_family() -> families.Family:
    found = families.installed()
    if not found:
        pytest.skip("no Tasks framework installed")
    return found[0]


def test_a_signal_is_sent_only_when_something_would_receive_it():
    from django.dispatch import Signal

    from django_pqjobs.tasks.sending import observed

    family = _a_family()
    signal = Signal()
    assert not observed(family, signal, logging.INFO)  # no receivers at all

    log_receiver = next(iter(family.log_receivers))
    signal.connect(log_receiver)
    level = family.logger.level
    try:
        family.logger.setLevel(logging.WARNING)
        assert not observed(family, signal, logging.INFO)  # it would log nothing
        assert observed(family, signal, logging.ERROR)
        family.logger.setLevel(logging.INFO)
        assert observed(family, signal, logging.INFO)
        family.logger.setLevel(logging.WARNING)

        def receiver(**kwargs: object) -> None:
            return None

        signal.connect(receiver)
        assert observed(family, signal, logging.INFO)  # someone else listens
        signal.disconnect(receiver)
        assert not observed(family, signal, logging.INFO)
    finally:
        family.logger.setLevel(level)
        signal.disconnect(log_receiver)
