"""OpenTelemetry: the trace context of the enqueuing request is stored with the job and
continued by each attempt's span, across retries and into chained jobs."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import ProxyTracerProvider, SpanKind, StatusCode

from django_pqjobs import enqueue_job, enqueue_many, tracing
from django_pqjobs.models import Job
from tests.helpers import wait_for, wait_status

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def spans(monkeypatch) -> Iterator[InMemorySpanExporter]:
    """An SDK tracer provider exporting to memory, as a project would configure one."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(trace, "_TRACER_PROVIDER", provider)
    yield exporter
    provider.shutdown()


def by_name(exporter: InMemorySpanExporter, name: str) -> list:
    return [s for s in exporter.get_finished_spans() if s.name == name]


def test_the_request_trace_reaches_every_attempt_and_chained_jobs(spans, client, worker_factory):
    tracer = trace.get_tracer("the-web-framework")
    with tracer.start_as_current_span("POST /shop/reports/", kind=SpanKind.SERVER) as request:
        response = client.post("/shop/reports/", {"name": "traced"})
    trace_id = request.get_span_context().trace_id
    job_id = response.json()["job_id"]
    stored = Job.objects.get(pk=job_id).trace_context
    assert stored["traceparent"].split("-")[1] == f"{trace_id:032x}"

    Job.objects.filter(pk=job_id).update(payload={"name": "traced", "fail_times": 1})
    worker_factory(concurrency=2)
    wait_status(job_id, "done")
    summary = Job.objects.get(parent_id=job_id)
    wait_status(summary.pk, "done")
    wait_for(lambda: len(by_name(spans, "run summarize")) == 1)

    (enqueue,) = by_name(spans, "enqueue flaky_report")
    assert enqueue.kind == SpanKind.PRODUCER
    assert enqueue.parent.span_id == request.get_span_context().span_id
    assert enqueue.attributes["messaging.message.id"] == str(job_id)
    assert enqueue.attributes["messaging.destination.name"] == "default"

    attempts = sorted(
        by_name(spans, "run flaky_report"), key=lambda s: s.attributes["pqjobs.attempt"]
    )
    assert [s.attributes["pqjobs.attempt"] for s in attempts] == [1, 2]  # one span per attempt
    for span in attempts:
        assert span.kind == SpanKind.CONSUMER
        assert span.context.trace_id == trace_id
        assert span.parent.span_id == enqueue.context.span_id
        assert span.attributes["messaging.message.id"] == str(job_id)
    assert attempts[0].status.status_code == StatusCode.ERROR
    assert "upstream busy on attempt 1" in attempts[0].status.description
    assert attempts[1].status.status_code != StatusCode.ERROR

    # the job the second attempt enqueued continues the same trace, under that attempt
    (chained_enqueue,) = by_name(spans, "enqueue summarize")
    (chained_run,) = by_name(spans, "run summarize")
    assert chained_enqueue.parent.span_id == attempts[1].context.span_id
    assert chained_run.parent.span_id == chained_enqueue.context.span_id
    assert chained_run.context.trace_id == trace_id


def test_enqueue_many_stores_one_context_for_the_batch(spans):
    tracer = trace.get_tracer("test")
    with tracer.start_as_current_span("batch") as parent:
        ids = enqueue_many("tests.noop", [{}, {}, {}])
    contexts = {Job.objects.get(pk=i).trace_context["traceparent"][:-3] for i in ids}
    (enqueue,) = by_name(spans, "enqueue tests.noop")
    trace_id, span_id = parent.get_span_context().trace_id, enqueue.context.span_id
    assert contexts == {f"00-{trace_id:032x}-{span_id:016x}"}  # version, trace, parent span
    assert enqueue.attributes["messaging.batch.message_count"] == 3


def test_no_provider_no_spans_no_context(monkeypatch):
    monkeypatch.setattr(trace, "_TRACER_PROVIDER", None)
    assert isinstance(trace.get_tracer_provider(), ProxyTracerProvider)
    assert tracing.tracer() is None
    job_id = enqueue_job("tests.noop")
    assert Job.objects.get(pk=job_id).trace_context is None


def test_without_the_extra_nothing_is_imported_and_enqueue_works(monkeypatch):
    for name in [m for m in sys.modules if m == "opentelemetry" or m.startswith("opentelemetry.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "opentelemetry", None)  # import opentelemetry fails
    for name, value in [("_api", None), ("_api_loaded", False), ("_provider", None)]:
        monkeypatch.setattr(tracing, name, value)  # restored when the test ends
    assert tracing.tracer() is None
    job_id = enqueue_job("tests.noop")
    assert Job.objects.get(pk=job_id).trace_context is None
