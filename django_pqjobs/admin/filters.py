"""List filters that stay fast on millions of rows, and refuse values they do not offer.

A value that is not one of a filter's choices (or, for names, not a name a job could
have) is refused with a message rather than sent to the database.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django import forms
from django.contrib import admin
from django.contrib.postgres.expressions import ArraySubquery
from django.core.exceptions import ValidationError
from django.db import connections
from django.db.models import Exists, F, Lookup, OuterRef, QuerySet
from django.http import HttpRequest

from .. import options
from ..errors import InvalidJobOption
from ..flow import known_queues
from ..models import Dependency
from ..options import EARLIEST_RUN_AFTER as EARLIEST
from ..options import LATEST_RUN_AFTER as LATEST
from ..sql import queries
from ..statuses import FINISHED_STATUSES, JobStatus
from .changelist import RefusedQuery
from .search import whole_number

QUERIES = queries("admin_filters")

# A "loose index scan": one index probe per distinct value instead of reading every row.
_DISTINCT = QUERIES["distinct"]


def distinct_job_types(alias: str) -> list[str]:
    with connections[alias].cursor() as cursor:
        cursor.execute(_DISTINCT.format(column="job_type"))
        return [row[0] for row in cursor.fetchall()]


def _refuse(filter_: admin.SimpleListFilter, value: object, why: str) -> RefusedQuery:
    return RefusedQuery(f"Filter {filter_.title!r} ({filter_.parameter_name}={value!r}): {why}")


class StatusFilter(admin.SimpleListFilter):
    """By status; the parameter keeps the name Django's field filter gives it."""

    title = "status"
    parameter_name = "status__exact"
    fetch_then_sort = False

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(str(value), str(label)) for value, label in JobStatus.choices]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        value = self.value()
        if not value:
            return queryset
        if value not in JobStatus.values:
            raise _refuse(self, value, f"a status is one of {', '.join(JobStatus.values)}")
        if value == JobStatus.WAITING:
            # No index holds waiting jobs; each has edges, and saying so lets the planner
            # start from them where they are few (and sort what it found).
            self.fetch_then_sort = True
            edges = Dependency.objects.using(queryset.db).filter(job_id=OuterRef("pk"))
            return queryset.filter(Exists(edges), status=value)
        return queryset.filter(status=value)


class JobTypeFilter(admin.SimpleListFilter):
    title = "job type"
    parameter_name = "job_type"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(value, value) for value in distinct_job_types(model_admin.database_for(request))]

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
        return [(value, value) for value in sorted(known_queues())]

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


class SequenceFilter(admin.SimpleListFilter):
    """The halted sequences: failed jobs of a sequence with jobs waiting on them (the rest of
    it), each to Retry or Skip. (The failed-jobs index serves it.)"""

    title = "sequence"
    parameter_name = "sequence"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("halted", "Halted (Retry or Skip the failed job)")]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        value = self.value()
        if not value:
            return queryset
        if value != "halted":
            raise _refuse(self, value, "use halted")
        return queryset.filter(
            status=JobStatus.FAILED, sequence_key__isnull=False, has_dependents=True
        )


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


class IdFilter(admin.SimpleListFilter):
    """Jobs related to one batch or job, by its id: offered by the links of the batch and
    job pages, not listed beside the list (there are too many ids to choose from). Shown
    there while it is applied, with "All" to clear it.

    Each costs what the batch or the job's edges hold, not the jobs enqueued since: see
    ``related``."""

    subject = "job"  # what the id names, as the sidebar says it
    fetch_then_sort = False
    sorts_what_it_fetched = True  # the value ``fetch_then_sort`` takes once applied

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        value = self.value()
        # A choice whenever a value is given: a filter with no choices is not applied, so
        # a bad value would be ignored instead of refused.
        return [(value, f"{self.subject} #{value:.40}")] if value else []

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        value = self.value()
        if not value:
            return queryset
        number = whole_number(value)
        if number is None:
            raise _refuse(self, value, f"give a {self.subject} id (a whole number)")
        self.fetch_then_sort = self.sorts_what_it_fetched
        return self.related(queryset, number)

    def related(self, queryset: QuerySet, pk: int) -> QuerySet:
        """The jobs related to ``pk``. Those a column of the job says are read through
        that column's index, then sorted (``fetch_then_sort``, see ``changelist.py``);
        those the edges name are looked up by primary key in the list's order."""
        raise NotImplementedError


class BatchFilter(IdFilter):
    """The members of a batch (the index ``pqjobs_job_batch``, with the status filter too)."""

    title = "batch"
    parameter_name = "batch__id__exact"
    subject = "batch"

    def related(self, queryset: QuerySet, pk: int) -> QuerySet:
        return queryset.filter(batch_id=pk)


class CallbackOfFilter(IdFilter):
    """The callback jobs a batch's finishes enqueued (``pqjobs_job_callback``)."""

    title = "callbacks of batch"
    parameter_name = "callback_of__id__exact"
    subject = "batch"

    def related(self, queryset: QuerySet, pk: int) -> QuerySet:
        return queryset.filter(callback_of_id=pk)


class AnyOf(Lookup):
    """``lhs = ANY(rhs)``, rhs an array. With an ``ARRAY(subquery)`` of ids, PostgreSQL
    reads the subquery once and probes the primary key in the list's order, stopping after
    a page: a join would rather walk the whole primary key, or hash the whole table."""

    lookup_name = "any_of"

    def as_sql(self, compiler: Any, connection: Any) -> tuple[str, tuple[Any, ...]]:
        lhs, lhs_params = self.process_lhs(compiler, connection)
        rhs, rhs_params = self.process_rhs(compiler, connection)
        return f"{lhs} = ANY({rhs})", (*lhs_params, *rhs_params)


class DependenciesFilter(IdFilter):
    """The jobs a job depends on (the edges' unique index leads with the dependent)."""

    title = "dependencies of"
    parameter_name = "dependencies_of"
    sorts_what_it_fetched = False

    def related(self, queryset: QuerySet, pk: int) -> QuerySet:
        edges = Dependency.objects.using(queryset.db).filter(job_id=pk)
        return queryset.filter(AnyOf(F("pk"), ArraySubquery(edges.values("depends_on_id"))))


class DependentsFilter(IdFilter):
    """The jobs that depend on a job (the edges' index on ``depends_on``)."""

    title = "dependents of"
    parameter_name = "dependents_of"
    sorts_what_it_fetched = False

    def related(self, queryset: QuerySet, pk: int) -> QuerySet:
        edges = Dependency.objects.using(queryset.db).filter(depends_on_id=pk)
        return queryset.filter(AnyOf(F("pk"), ArraySubquery(edges.values("job_id"))))
