"""List filters that stay fast on millions of rows, and refuse values they do not offer.

A value that is not one of a filter's choices (or, for names, not a name a job could
have) is refused with a message rather than sent to the database.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django import forms
from django.contrib import admin
from django.core.exceptions import ValidationError
from django.db import connections
from django.db.models import QuerySet
from django.http import HttpRequest

from .. import options
from ..conf import conf
from ..errors import InvalidJobOption
from ..options import EARLIEST_RUN_AFTER as EARLIEST
from ..options import LATEST_RUN_AFTER as LATEST
from ..registry import registry
from ..statuses import FINISHED_STATUSES, JobStatus
from .changelist import RefusedQuery

# A "loose index scan": one index probe per distinct value instead of reading every row.
_DISTINCT = """
WITH RECURSIVE seen AS (
    (SELECT {column} AS value FROM pqjobs_job ORDER BY {column} LIMIT 1)
    UNION ALL
    SELECT (SELECT {column} FROM pqjobs_job WHERE {column} > seen.value
            ORDER BY {column} LIMIT 1)
    FROM seen WHERE seen.value IS NOT NULL
)
SELECT value FROM seen WHERE value IS NOT NULL LIMIT 500
"""


def distinct_job_types() -> list[str]:
    with connections[conf.DATABASE].cursor() as cursor:
        cursor.execute(_DISTINCT.format(column="job_type"))
        return [row[0] for row in cursor.fetchall()]


def known_queues() -> list[str]:
    """Queues from the configuration: no index on queue, so no scan for its values."""
    names = {conf.DEFAULT_QUEUE, *(conf.QUEUES or [])}
    names.update(t.queue for t in registry.all() if t.queue)
    return sorted(names)


def _refuse(filter_: admin.SimpleListFilter, value: object, why: str) -> RefusedQuery:
    return RefusedQuery(f"Filter {filter_.title!r} ({filter_.parameter_name}={value!r}): {why}")


class StatusFilter(admin.SimpleListFilter):
    """By status; the parameter keeps the name Django's field filter gives it."""

    title = "status"
    parameter_name = "status__exact"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(str(value), str(label)) for value, label in JobStatus.choices]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        value = self.value()
        if not value:
            return queryset
        if value not in JobStatus.values:
            raise _refuse(self, value, f"a status is one of {', '.join(JobStatus.values)}")
        return queryset.filter(status=value)


class JobTypeFilter(admin.SimpleListFilter):
    title = "job type"
    parameter_name = "job_type"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(value, value) for value in distinct_job_types()]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        value = self.value()
        if not value:
            return queryset
        try:
            options.job_type_name(value)
        except InvalidJobOption as exc:
            raise _refuse(self, value, str(exc)) from None
        return queryset.filter(job_type=value)


class QueueFilter(admin.SimpleListFilter):
    title = "queue"
    parameter_name = "queue"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(value, value) for value in known_queues()]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        value = self.value()
        if not value:
            return queryset
        try:
            options.queue_name(value)
        except InvalidJobOption as exc:
            raise _refuse(self, value, str(exc)) from None
        return queryset.filter(queue=value)


class HasErrorFilter(admin.SimpleListFilter):
    title = "has error"
    parameter_name = "has_error"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("yes", "Yes"), ("no", "No")]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        if self.value() == "yes":
            return queryset.exclude(last_error="")
        if self.value() == "no":
            return queryset.filter(last_error="")
        if self.value():
            raise _refuse(self, self.value(), "use yes or no")
        return queryset


class DateFilter(admin.DateFieldListFilter):
    """By date, with the bounds from the URL checked: dates, inside the calendar."""

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet | None:
        for key in (self.lookup_kwarg_since, self.lookup_kwarg_until):
            if key in self.used_parameters:
                given = self.used_parameters[key]
                texts = given if isinstance(given, list) else [given]
                self.used_parameters[key] = [self._moment(key, text) for text in texts]
        return super().queryset(request, queryset)

    def _moment(self, key: str, text: Any) -> datetime:
        """The bound as an aware datetime (a date alone is midnight in the current zone)."""
        try:
            moment = forms.DateTimeField().to_python(text)
        except ValidationError as exc:
            raise RefusedQuery(f"{key}={text!r}: {' '.join(exc.messages)}") from None
        try:
            in_calendar = moment is not None and EARLIEST <= moment.astimezone(UTC) <= LATEST
        except OverflowError:
            in_calendar = False
        if moment is None or not in_calendar:
            raise RefusedQuery(f"{key}={text!r}: give a date between the years 1 and 9999")
        return moment


class FinishedFilter(DateFilter):
    """By finish date. Only finished jobs have one, and saying so in the query lets the
    finished-jobs index answer (a range with no jobs in it would otherwise walk the
    whole table)."""

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet | None:
        filtered = super().queryset(request, queryset)
        bounds = (self.lookup_kwarg_since, self.lookup_kwarg_until)
        dated = any(key in self.used_parameters for key in bounds)
        if filtered is not None and dated:
            return filtered.filter(status__in=FINISHED_STATUSES)
        return filtered
