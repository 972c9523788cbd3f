"""``django_pqjobs.tasks.PQJobsBackend``: django-pqjobs behind Django's Tasks framework.

One class serves both implementations of the framework: it derives from the
``BaseTaskBackend`` of each one installed, and each instance serves the family whose
``task_backends`` handler created it (see :mod:`.families`), so a caller always gets its own
family's ``Task`` class, ``TaskResult``, statuses and exceptions.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.checks import CheckMessage
from django.utils import timezone

from ..conf import conf
from ..enqueue import PreparedJob, insert, prepare
from ..errors import InvalidJobOption, JobTypeAlreadyRegistered
from ..options import job_type_name
from ..registry import registry
from . import activation, families, identity, payload, results
from .arguments import normalize_arguments
from .binding import bound_task
from .checks import backend_checks
from .errors import TaskNotLoadable
from .loader import load_task, queues_of
from .options import parse_backend_options
from .runner import check_importable, ensure_registered
from .sending import observed, send

_MAX_JOB_ID = 2**63 - 1


def _framework_bases() -> tuple[type, ...]:
    bases = tuple(family.base_backend for family in families.installed())
    if not bases:
        families.creating_backend()  # raises the ImportError that says what to install
    return bases


if TYPE_CHECKING:
    _FrameworkBackend = object
else:
    _FrameworkBackend = type("FrameworkBackend", _framework_bases(), {"__module__": __name__})


@identity.register
class PQJobsBackend(_FrameworkBackend):
    """A ``TASKS`` backend that stores tasks as django-pqjobs jobs, run by ``run_jobs``.

    ``TASKS = {"default": {"BACKEND": "django_pqjobs.tasks.PQJobsBackend",
    "QUEUES": ["default", "emails"], "OPTIONS": {"MAX_ATTEMPTS": 3}}}``

    ``OPTIONS`` keys give defaults for every task of the backend: ``MAX_ATTEMPTS``,
    ``TIMEOUT``, ``BACKOFF``, ``ISOLATION``, ``MEMORY_LIMIT``, ``DEDUPE``. Unset ones come
    from ``PQJOBS``. A task's own options (``@task(...)`` keywords on Django 6.1+ and the
    backport, or ``@task_options(...)``) win over them.
    """

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        self.family = families.creating_backend()
        self.alias = alias
        self.queues = queues_of(params)
        self.options = params.get("OPTIONS", {})
        try:
            self.defaults = parse_backend_options(self.options, alias)
        except InvalidJobOption as exc:
            raise self.family.invalid_backend(str(exc)) from None
        activation.activate()

    def __repr__(self) -> str:
        return f"<PQJobsBackend {self.alias!r} ({self.family.name})>"

    @property
    def task_class(self) -> type:
        """The family's ``Task`` with django-pqjobs's options as extra fields."""
        return self.family.task_class

    # --- declaring tasks ----------------------------------------------------------------------

    def validate_task(self, task: Any) -> None:
        """The framework's checks, then django-pqjobs's: the task's options, and its module
        path as a job type (registered here, so workers run it like any job)."""
        family = self.family
        found = families.of_task(task)
        if found is not family:
            raise family.invalid_task(
                f"this backend serves {family.name} tasks; got {type(task).__module__} "
                f"{type(task).__qualname__}"
            )
        family.base_backend.validate_task(self, task)
        try:
            job_type_name(task.module_path, "a task's module path (its job type)")
            ensure_registered(task, family, self.defaults)
        except (InvalidJobOption, JobTypeAlreadyRegistered) as exc:
            raise family.invalid_task(str(exc)) from None

    # --- enqueue ------------------------------------------------------------------------------

    def enqueue(self, task: Any, args: Any, kwargs: Any) -> Any:
        """Insert the task's job in the caller's transaction and return its READY TaskResult.

        Raises TaskArgumentsError (a ``TypeError``) naming the task and the argument when an
        argument does not round-trip through JSON, or does not fit its parameter's type (a
        typed parameter: see :mod:`.typed`), the family's InvalidTask for a queue not in
        ``QUEUES``, and ``DuplicateJob`` for a duplicate under ``dedupe="error"``. The
        result's ``args`` and ``kwargs`` are as stored: typed arguments in their JSON form.
        """
        job, clean_args, clean_kwargs = self._prepare(task, args, kwargs)
        job_id = insert(job)
        family = self.family
        if job.dedupe_key is None:
            result = results.enqueued(family, task, job_id, clean_args, clean_kwargs, self.alias)
        else:  # maybe an existing job (a duplicate, or a unique task's): its real state
            result = self.get_result(str(job_id))
        if observed(family, family.task_enqueued, logging.DEBUG):
            send(family, family.task_enqueued, result, job.job_type)
        return result

    def _prepare(self, task: Any, args: Any, kwargs: Any) -> tuple[PreparedJob, Any, Any]:
        """The task's job, validated (and its job type registered), not yet inserted."""
        family = self.family
        if self.queues and task.queue_name not in self.queues:
            raise family.invalid_task(f"Queue '{task.queue_name}' is not valid for backend.")
        try:
            job_type = ensure_registered(task, family, self.defaults)
            check_importable(task)
        except (InvalidJobOption, JobTypeAlreadyRegistered) as exc:
            raise family.invalid_task(str(exc)) from None
        bound = bound_task(job_type)
        assert bound is not None
        path = job_type.name
        typed = bound.typed
        if typed is None:
            clean_args, clean_kwargs = normalize_arguments(path, args, kwargs)
        else:  # typed arguments in their JSON form first; all of them must be JSON then
            clean_args, clean_kwargs = normalize_arguments(path, *typed.dump(path, args, kwargs))
        dedupe_key, fair_key = bound.options.dedupe_key, bound.options.fair_key
        if callable(dedupe_key):
            dedupe_key = dedupe_key(*args, **kwargs)
        if callable(fair_key):
            fair_key = fair_key(*args, **kwargs)
        job = prepare(
            path,
            payload.build(self.alias, clean_args, clean_kwargs),
            queue=task.queue_name,
            priority=task.priority,
            run_after=_aware(task.run_after),
            dedupe_key=dedupe_key,
            fair_key=fair_key,
        )
        return job, clean_args, clean_kwargs

    def prepare_call(self, task: Any, args: Any, kwargs: Any) -> PreparedJob:
        """The job a call of ``task`` would enqueue, not inserted (a batch's callback)."""
        return self._prepare(task, args, kwargs)[0]

    async def aenqueue(self, task: Any, args: Any, kwargs: Any) -> Any:
        """:meth:`enqueue` from async code."""
        return await sync_to_async(self.enqueue, thread_sensitive=True)(task, args, kwargs)

    # --- results ------------------------------------------------------------------------------

    def get_result(self, result_id: str) -> Any:
        """The TaskResult of a task job (its id is the job id), read from the database.

        Raises the family's ``TaskResultDoesNotExist`` for an unknown or malformed id, a job
        that is not a task, or a task that cannot be loaded here.
        """
        family = self.family
        job_id = _job_id(result_id)
        if job_id is None:
            raise family.result_does_not_exist(
                f"no task result {result_id!r}: result ids are job ids (whole numbers)"
            )
        from ..models import Job

        try:
            job: Job | None = Job.objects.using(conf.DATABASE).get_hot_first(pk=job_id)
        except Job.DoesNotExist:
            job = None
        if job is None or not payload.is_task_payload(job.payload):
            raise family.result_does_not_exist(f"no task result {result_id!r}")
        try:
            task = _task_of(job.job_type)
        except TaskNotLoadable as exc:
            raise family.result_does_not_exist(
                f"task result {result_id!r} is of a task that cannot be loaded: {exc}"
            ) from None
        history = (
            results.load_history(conf.DATABASE, job.id) if results.needs_history(job) else None
        )
        return results.build(family, task, job, history)

    async def aget_result(self, result_id: str) -> Any:
        """:meth:`get_result` from async code."""
        return await sync_to_async(self.get_result, thread_sensitive=True)(result_id)

    def check(self, **kwargs: Any) -> Iterable[CheckMessage]:
        return backend_checks(self.alias)


def _task_of(job_type: str) -> Any:
    """The task a job runs: the one this process declared, else loaded from its path."""
    bound = bound_task(registry.get(job_type))
    return bound.task if bound is not None else load_task(job_type)


def _job_id(result_id: object) -> int | None:
    if isinstance(result_id, bool):
        return None
    if isinstance(result_id, int):
        value = result_id
    elif isinstance(result_id, str) and result_id.isascii() and result_id.isdigit():
        value = int(result_id)
    else:
        return None
    return value if 0 < value <= _MAX_JOB_ID else None


def _aware(moment: datetime | None) -> datetime | None:
    """``run_after`` as enqueue needs it: a naive one (allowed with USE_TZ = False) is in the
    current time zone."""
    if moment is None or settings.USE_TZ or timezone.is_aware(moment):
        return moment
    return timezone.make_aware(moment)
