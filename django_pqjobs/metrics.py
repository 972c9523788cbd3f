"""Prometheus metrics (optional: ``pip install django-pqjobs[metrics]``).

Everything is read from the database at scrape time, so one scrape of any web process
shows the whole queue, whatever the number of worker processes and hosts::

    # urls.py
    from django_pqjobs.metrics import metrics_view
    urlpatterns = [path("metrics", metrics_view)]

The view answers active staff users and requests that carry ``PQJOBS['METRICS_TOKEN']``
as a bearer token (``PQJOBS['METRICS_PUBLIC'] = True``: anyone). Or add
:class:`JobQueueCollector` to a registry you already expose
(``prometheus_client.REGISTRY.register(JobQueueCollector())``).

Gauges (the queue now): ``pqjobs_jobs`` per queue, job type and status (ready, blocked,
waiting, running, failed), ``pqjobs_jobs_due`` (ready and due), ``pqjobs_jobs_blocked``
per queue and what holds them (limit, rate, paused), ``pqjobs_queue_lag_seconds`` (how long
the oldest due job of each queue has waited for a worker or for room under a limit),
``pqjobs_queue_paused_lag_seconds`` (the same for the jobs a pause holds),
``pqjobs_queue_paused`` and ``pqjobs_job_type_paused`` (1 per paused name),
``pqjobs_workers`` (live and stale) and ``pqjobs_worker_threads``; for the ten fair keys
with the most jobs waiting only (``@job(fair_key=...)``), ``pqjobs_fair_key_waiting``,
``pqjobs_fair_key_running`` and ``pqjobs_fair_key_oldest_wait_seconds``. Counters (since ever,
from every worker): ``pqjobs_attempts_total`` per queue, job type and outcome, and the
histogram ``pqjobs_attempt_duration_seconds`` per queue and job type. The counters are
added by workers every ``STATS_INTERVAL``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest, HttpResponse

try:
    from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
    from prometheus_client.core import (
        CounterMetricFamily,
        GaugeMetricFamily,
        HistogramMetricFamily,
    )
    from prometheus_client.utils import floatToGoString
except ImportError as exc:  # pragma: no cover - exercised without the extra installed
    raise ImproperlyConfigured(
        "django_pqjobs.metrics needs prometheus-client: pip install 'django-pqjobs[metrics]'"
    ) from exc

from . import access, fairness, flow, monitoring, stats
from .conf import conf

__all__ = ["JobQueueCollector", "metrics_view"]


class JobQueueCollector:
    """A Prometheus collector of the job queue, read from the database on each collect."""

    def __init__(self, using: str | None = None) -> None:
        self.using = using

    def describe(self) -> list[Any]:
        return []  # the families are known only once read; registries then call collect

    def collect(self) -> Iterator[Any]:
        started = time.perf_counter()
        alias = self.using or conf.READ_DATABASE
        depth = monitoring.depth(alias)

        jobs = GaugeMetricFamily(
            "pqjobs_jobs",
            "Jobs per queue, job type and status (ready, blocked, waiting, running, failed, "
            "and expired: those of the last 24 h; failed jobs past "
            f"{monitoring.FAILED_EXACT_UP_TO:,} are an estimate)",
            labels=["queue", "job_type", "status"],
        )
        due = GaugeMetricFamily(
            "pqjobs_jobs_due",
            "Ready jobs whose run_after has come, per queue and job type",
            labels=["queue", "job_type"],
        )
        blocked = GaugeMetricFamily(
            "pqjobs_jobs_blocked",
            "Jobs held back by flow control, per queue and what holds them (limit: a "
            "concurrency limit, rate: a rate limit, paused: a paused queue or job type)",
            labels=["queue", "blocked_by"],
        )
        per_status: dict[tuple[str, str, str], int] = {}
        per_hold: dict[tuple[str, str], int] = {}
        for row in depth:
            of_status = (row.queue, row.job_type, row.status)
            per_status[of_status] = per_status.get(of_status, 0) + row.count
            if row.status == "ready":
                due.add_metric([row.queue, row.job_type], row.due)
            elif row.status == "blocked":
                hold = (row.queue, row.blocked_by or "")
                per_hold[hold] = per_hold.get(hold, 0) + row.count
        for (queue, job_type, status), count in per_status.items():
            jobs.add_metric([queue, job_type, status], count)
        for (queue, blocked_by), count in sorted(per_hold.items()):
            blocked.add_metric([queue, blocked_by], count)
        yield jobs
        yield due
        yield blocked

        lag = GaugeMetricFamily(
            "pqjobs_queue_lag_seconds",
            "How long the oldest due job of each queue has waited for a worker or for room "
            "under a concurrency or rate limit (0: none waiting)",
            labels=["queue"],
        )
        for queue, seconds in sorted(monitoring.lag_by_queue(depth).items()):
            lag.add_metric([queue], seconds)
        yield lag
        paused_lag = GaugeMetricFamily(
            "pqjobs_queue_paused_lag_seconds",
            "How long the oldest job of each queue held by a pause (of the queue or of its "
            "job type) has waited since it was due",
            labels=["queue"],
        )
        for queue, seconds in sorted(monitoring.paused_lag_by_queue(depth).items()):
            paused_lag.add_metric([queue], seconds)
        yield paused_lag

        paused_queues = GaugeMetricFamily(
            "pqjobs_queue_paused", "1 for each paused queue", labels=["queue"]
        )
        paused_types = GaugeMetricFamily(
            "pqjobs_job_type_paused", "1 for each paused job type", labels=["job_type"]
        )
        for pause in flow.paused(alias):
            family = paused_queues if pause.kind == "queue" else paused_types
            family.add_metric([pause.name], 1)
        yield paused_queues
        yield paused_types

        yield from _fair_key_families(alias)

        behind = monitoring.read_lag(alias)
        if behind is not None:
            read_lag = GaugeMetricFamily(
                "pqjobs_read_lag_seconds",
                "How far behind its primary the replica these metrics are read from is "
                "(PQJOBS['READ_DATABASE']); shown only when that database is a standby",
            )
            read_lag.add_metric([], behind)
            yield read_lag

        workers = monitoring.workers(alias)
        live = [w for w in workers if monitoring.is_live(w)]
        states = GaugeMetricFamily(
            "pqjobs_workers",
            "Workers in the worker table: live (heartbeat within three heartbeat intervals) "
            "or stale (their running jobs are rescued after the stale timeout)",
            labels=["state"],
        )
        states.add_metric(["live"], len(live))
        states.add_metric(["stale"], len(workers) - len(live))
        yield states
        yield GaugeMetricFamily(
            "pqjobs_worker_threads",
            "Executor threads of the live workers",
            value=sum(w.concurrency for w in live),
        )

        attempts = CounterMetricFamily(
            "pqjobs_attempts",
            "Attempts recorded by workers, per queue, job type and outcome (done, retry, "
            "failed, cancelled, lost, released, snoozed, parked, unrecorded)",
            labels=["queue", "job_type", "outcome"],
        )
        seconds_by_type: dict[tuple[str, str], float] = {}
        for total in stats.outcome_totals(alias):
            attempts.add_metric([total.queue, total.job_type, total.outcome], total.count)
            if total.outcome in stats.TIMED_OUTCOMES:
                key = (total.queue, total.job_type)
                seconds_by_type[key] = seconds_by_type.get(key, 0.0) + total.duration_ms / 1000
        yield attempts
        yield _histogram(stats.bucket_totals(alias), seconds_by_type)

        yield GaugeMetricFamily(
            "pqjobs_scrape_duration_seconds",
            "How long reading these metrics from the database took",
            value=time.perf_counter() - started,
        )


def _fair_key_families(alias: str) -> list[Any]:
    """The fair keys with the most jobs waiting, from one read (``fairness.fair_keys``):
    only the top ``SHOWN_KEYS``, so a tenant per key cannot make the labels unbounded."""
    top = f"the {fairness.SHOWN_KEYS} fair keys with the most jobs waiting only"
    waiting = GaugeMetricFamily(
        "pqjobs_fair_key_waiting",
        f"Jobs waiting (ready or blocked) per fair key (@job(fair_key=...)); {top}",
        labels=["key"],
    )
    running = GaugeMetricFamily(
        "pqjobs_fair_key_running",
        f"Jobs running per fair key; {top} (by jobs waiting)",
        labels=["key"],
    )
    oldest = GaugeMetricFamily(
        "pqjobs_fair_key_oldest_wait_seconds",
        f"How long the oldest due ready job of each fair key has waited (0: none due); {top}",
        labels=["key"],
    )
    for key in fairness.fair_keys(fairness.SHOWN_KEYS, using=alias):
        waiting.add_metric([key.key], key.waiting)
        running.add_metric([key.key], key.running)
        oldest.add_metric([key.key], key.oldest_wait or 0.0)
    return [waiting, running, oldest]


def _histogram(
    buckets: list[stats.BucketTotal], seconds_by_type: dict[tuple[str, str], float]
) -> Any:
    family = HistogramMetricFamily(
        "pqjobs_attempt_duration_seconds",
        "How long attempts that ran a handler took, per queue and job type",
        labels=["queue", "job_type"],
    )
    counts: dict[tuple[str, str], dict[float, int]] = {}
    for bucket in buckets:
        counts.setdefault((bucket.queue, bucket.job_type), {})[bucket.le] = bucket.count
    for key, by_bound in sorted(counts.items()):
        cumulative = 0
        series = []
        for bound in stats.DURATION_BUCKETS:
            cumulative += by_bound.get(bound, 0)
            label = "+Inf" if math.isinf(bound) else floatToGoString(bound)
            series.append((label, cumulative))
        family.add_metric(list(key), series, sum_value=seconds_by_type.get(key, 0.0))
    return family


def metrics_view(request: HttpRequest) -> HttpResponse:
    """The job queue's metrics in Prometheus' text format.

    Answers active staff users and requests with ``Authorization: Bearer <METRICS_TOKEN>``;
    others get 401 (a token is configured) or 403. ``PQJOBS['METRICS_PUBLIC'] = True``
    opens it to anyone.
    """
    if not (conf.METRICS_PUBLIC or access.is_observer(request)):
        return access.refusal()
    registry = CollectorRegistry(auto_describe=False)
    registry.register(JobQueueCollector())
    response = HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)
    return access.vary_on_credentials(response)
