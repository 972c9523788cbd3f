"""OpenTelemetry spans: one for each enqueue, one for each attempt.

Optional: ``pip install django-pqjobs[tracing]`` (``opentelemetry-api``) and a tracer
provider configured by the project (the OpenTelemetry SDK, or a distro's auto-setup).

- Enqueue (``enqueue_job``, ``enqueue_many``, ``ctx.enqueue``, schedules): a PRODUCER span
  ``enqueue <job type>``, a child of whatever span is current (the web request, the parent
  job's attempt). Its W3C trace context is stored with the job (``Job.trace_context``).
- Each attempt: a CONSUMER span ``run <job type>``, a child of the stored context, so every
  attempt of a job, in whichever worker process on whichever host, joins the trace of the
  request that enqueued it. Failures set the span's status and record the exception.

Cost: ``opentelemetry`` is imported once, on first use; when it is not installed, or no
tracer provider is configured (the API's default no-op provider), no span is started and
no context is stored: one cached check per enqueue, and per claimed batch of attempts.
"""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .models import Job

INSTRUMENTATION = "django_pqjobs"
SYSTEM = "pqjobs"

_api: SimpleNamespace | None = None
_api_loaded = False
_provider: Any = None
_tracer: Any = None
_ASK = object()  # attempt_span(): look the tracer up


def _load_api() -> SimpleNamespace | None:
    global _api, _api_loaded
    if not _api_loaded:
        try:
            from opentelemetry import propagate, trace
            from opentelemetry.trace import NoOpTracerProvider, ProxyTracerProvider
        except ImportError:
            _api = None
        else:
            _api = SimpleNamespace(
                trace=trace,
                propagate=propagate,
                no_op=(NoOpTracerProvider, ProxyTracerProvider),
            )
        _api_loaded = True
    return _api


def tracer() -> Any:
    """The tracer, or None when tracing is not in use (not installed, no provider set)."""
    global _provider, _tracer
    api = _load_api()
    if api is None:
        return None
    provider = api.trace.get_tracer_provider()
    if provider is not _provider:
        _provider = provider
        _tracer = None if isinstance(provider, api.no_op) else provider.get_tracer(INSTRUMENTATION)
    return _tracer


class _Span:
    """A started span, made current on ``__enter__`` and ended on ``__exit__`` (recording
    the exception that ends the block, if any)."""

    def __init__(self, span: Any) -> None:
        self.span = span
        self._scope: Any = None

    def __enter__(self) -> _Span:
        api = _load_api()
        assert api is not None
        self._scope = api.trace.use_span(
            self.span, end_on_exit=True, record_exception=True, set_status_on_exception=True
        )
        self._scope.__enter__()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self._scope.__exit__(*exc_info)

    def set(self, key: str, value: Any) -> None:
        self.span.set_attribute(key, value)


class EnqueueSpan(_Span):
    """The span of one enqueue; :attr:`context_json` is what the job row stores."""

    def __init__(self, span: Any) -> None:
        super().__init__(span)
        api = _load_api()
        assert api is not None
        carrier: dict[str, str] = {}
        api.propagate.inject(carrier, context=api.trace.set_span_in_context(span))
        self.context_json: str | None = json.dumps(carrier) if carrier else None

    def job_id(self, job_id: int | None) -> None:
        if job_id is not None:
            self.set("messaging.message.id", str(job_id))


def enqueue_span(job_type: str, queue: str, count: int = 1) -> EnqueueSpan | None:
    """Start the span of an enqueue, or None when tracing is not in use."""
    found = tracer()
    if found is None:
        return None
    api = _load_api()
    assert api is not None
    attributes: dict[str, Any] = {
        "messaging.system": SYSTEM,
        "messaging.operation.type": "send",
        "messaging.operation.name": "enqueue",
        "messaging.destination.name": queue,
        "pqjobs.job_type": job_type,
    }
    if count != 1:
        attributes["messaging.batch.message_count"] = count
    span = found.start_span(
        f"enqueue {job_type}", kind=api.trace.SpanKind.PRODUCER, attributes=attributes
    )
    return EnqueueSpan(span)


def attempt_span(job: Job, found: Any = _ASK) -> _Span | None:
    """Start the span of one attempt of ``job``, a child of the context stored when it was
    enqueued; None when tracing is not in use. ``found``: the :func:`tracer` if the caller
    already asked for it."""
    if found is _ASK:
        found = tracer()
    if found is None:
        return None
    api = _load_api()
    assert api is not None
    parent = None
    stored = job.trace_context
    if isinstance(stored, dict) and stored:
        parent = api.propagate.extract({str(k): str(v) for k, v in stored.items()})
    span = found.start_span(
        f"run {job.job_type}",
        context=parent,
        kind=api.trace.SpanKind.CONSUMER,
        attributes={
            "messaging.system": SYSTEM,
            "messaging.operation.type": "process",
            "messaging.operation.name": "run",
            "messaging.destination.name": job.queue,
            "messaging.message.id": str(job.id),
            "pqjobs.job_type": job.job_type,
            "pqjobs.attempt": job.attempts,
        },
    )
    return _Span(span)


def record_verdict(span: _Span, succeeded: bool, summary: str) -> None:
    """Mark the attempt's span with how the handler ended: an error status with the
    error's one-line summary unless it succeeded."""
    api = _load_api()
    assert api is not None
    if not succeeded:
        line = (summary.strip().splitlines() or ["failed"])[-1][:300]
        span.span.set_status(api.trace.Status(api.trace.StatusCode.ERROR, line))
