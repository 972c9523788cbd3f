"""Admin lists that no URL can make expensive or crash.

Django's change list takes whatever the query string says: any lookup on any field
(``?payload__key=...``, ``?job_type__regex=...``), a sort by any column and by any number
of them (``?o=3.5.7.8.9``), any page, facet counts over the whole table. On a table of
millions of jobs each of these reads every row. :class:`GuardedListAdmin` is a
``ModelAdmin`` whose list:

- understands only its own filters, the search box, the page and a sort: any other query
  parameter is refused with a 400 page that names it (and so is a NUL character in any
  value, which PostgreSQL cannot compare);
- sorts by one column at a time, and only by the columns in ``list_orderings`` (each
  mapped to an order an index serves);
- pages only up to the paginator's ``max_pages``;
- runs its statements under ``list_statement_timeout``: a filter whose rows are rare on a
  column without an index cannot hold the database longer than that; the page then says
  so (503) instead of waiting;
- lets a filter that has an index of its own (a batch's members, a job's dependents) be
  read through it: while such a filter applies (its ``fetch_then_sort`` is true) the sort
  is one no index serves. Otherwise PostgreSQL, expecting the matches spread evenly, walks
  the primary key from the newest job and checks each row until it has a page: through
  every job newer than an old batch.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from django.contrib import admin
from django.contrib.admin.exceptions import DisallowedModelAdminLookup
from django.contrib.admin.options import (
    IS_FACETS_VAR,
    IS_POPUP_VAR,
    TO_FIELD_VAR,
    IncorrectLookupParameters,
)
from django.contrib.admin.views.main import (
    ALL_VAR,
    ERROR_FLAG,
    ORDER_VAR,
    PAGE_VAR,
    SEARCH_VAR,
    ChangeList,
)
from django.core.exceptions import ValidationError
from django.db import OperationalError, connections, transaction
from django.db.models import F, QuerySet
from django.db.models.expressions import OrderBy
from django.db.models.functions import Coalesce
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse

from ..conf import conf
from ..sql import queries

QUERIES = queries("admin_changelist")

# Parameters of Django's change list itself (the filters add their own).
LIST_PARAMETERS = frozenset(
    {
        SEARCH_VAR,
        ORDER_VAR,
        PAGE_VAR,
        ALL_VAR,
        ERROR_FLAG,
        IS_POPUP_VAR,
        TO_FIELD_VAR,
        IS_FACETS_VAR,
    }
)
QUERY_CANCELED = "57014"  # SQLSTATE of a statement stopped by statement_timeout

# {column of list_display: (ordering when ascending, ordering when descending)}
Orderings = Mapping[str, tuple[Sequence[str], Sequence[str]]]


class RefusedQuery(Exception):
    """A list URL asks for something the list does not offer; the message says what."""


def was_cancelled(exc: BaseException) -> bool:
    """Whether a database error is a statement stopped by ``statement_timeout``."""
    cause = exc.__cause__
    return getattr(cause, "sqlstate", None) == QUERY_CANCELED or (
        getattr(cause, "pgcode", None) == QUERY_CANCELED
    )


@contextmanager
def statement_timeout(alias: str, seconds: float | None) -> Iterator[None]:
    """A transaction on ``alias`` whose every statement is stopped after ``seconds``."""
    connection = connections[alias]
    nested = connection.in_atomic_block
    with transaction.atomic(using=alias):
        if seconds is None:
            yield
            return
        with connection.cursor() as cursor:
            cursor.execute(
                QUERIES["swap_timeout"],
                [f"{max(1, round(seconds * 1000))}ms"],
            )
            previous = cursor.fetchone()[0]
        yield
        if nested:  # in a request-wide transaction the setting would outlive this block
            with connection.cursor() as cursor:
                cursor.execute(QUERIES["restore_timeout"], [previous])


class GuardedChangeList(ChangeList):
    """The change list of a :class:`GuardedListAdmin` admin (see the module docstring)."""

    model_admin: GuardedListAdmin

    def get_queryset(self, request: HttpRequest, exclude_parameters: Any = None) -> Any:
        if not getattr(self, "_vetted", False):
            self._vet(request)
            self._vetted = True
        rows = super().get_queryset(request, exclude_parameters)
        return self.model_admin.list_rows(request, rows)

    def _vet(self, request: HttpRequest) -> None:
        for key, values in request.GET.lists():
            if any("\x00" in text for text in (key, *values)):
                raise RefusedQuery(
                    f"The query parameter {key!r} contains a NUL character (%00), which no "
                    "stored value can contain."
                )
        max_pages = getattr(self.model_admin.paginator, "max_pages", None)
        if PAGE_VAR in request.GET and (
            self.page_num < 1 or (max_pages is not None and self.page_num > max_pages)
        ):
            raise RefusedQuery(
                f"Page {request.GET[PAGE_VAR]!r} is not shown: pages go from 1 to "
                f"{max_pages}. Narrow the list with a filter or a search instead."
            )
        self._keep_one_sortable_order()

    def _keep_one_sortable_order(self) -> None:
        """Keep the first term of ``o`` that names a sortable column; drop the rest."""
        terms = self.params.get(ORDER_VAR, "").split(".")
        kept = next((term for term in terms if self._sortable_column(term)), None)
        if kept is None:
            self.params.pop(ORDER_VAR, None)
            self.filter_params.pop(ORDER_VAR, None)
        else:
            self.params[ORDER_VAR] = kept
            self.filter_params[ORDER_VAR] = [kept]

    def _sortable_column(self, term: str) -> str | None:
        index = term.removeprefix("-")
        if not index.isdigit() or len(index) > 3 or int(index) >= len(self.list_display):
            return None
        column = self.list_display[int(index)]
        return column if isinstance(column, str) and column in self.orderings else None

    @property
    def orderings(self) -> Orderings:
        return self.model_admin.list_orderings

    def get_ordering(self, request: HttpRequest, queryset: Any) -> list[Any]:
        term = self.params.get(ORDER_VAR)
        column = self._sortable_column(term) if term else None
        if column is None:
            ordering = list(self.model_admin.get_ordering(request) or self.opts.ordering or [])
        else:
            ascending, descending = self.orderings[column]
            ordering = list(descending if term and term.startswith("-") else ascending)
        if any(getattr(spec, "fetch_then_sort", False) for spec in self.filter_specs):
            return [_unindexed(term) for term in ordering]
        return ordering

    def get_results(self, request: HttpRequest) -> None:
        super().get_results(request)
        # Django reads a list whose count fits on one page without a LIMIT: when that count
        # is only an estimate (an exact count ran out of time), a page is all it may read.
        rows = self.result_list
        if not getattr(self.paginator, "exact", True) and not rows.query.is_sliced:
            shown = self.list_max_show_all if self.show_all else self.list_per_page
            self.result_list = rows[:shown]

    def get_filters(self, request: HttpRequest) -> Any:
        try:
            specs, has_filters, remaining, duplicates, active = super().get_filters(request)
        except DisallowedModelAdminLookup as exc:
            raise RefusedQuery(
                f"{exc}: the list offers only the filters shown beside it."
            ) from None
        if remaining:
            understood = sorted(
                {str(p) for spec in specs for p in spec.expected_parameters()} | LIST_PARAMETERS
            )
            asked = sorted(repr(str(key)) for key in remaining)
            raise RefusedQuery(
                f"The list does not filter by {', '.join(asked)}. "
                f"It understands: {', '.join(understood)}."
            )
        return specs, has_filters, remaining, duplicates, active


def _unindexed(term: Any) -> Any:
    """The same order by an expression no index matches: ``COALESCE(id, id)`` sorts as
    ``id`` but the planner cannot walk an index for it, so it reads the matches through
    the filter's index and sorts them."""
    if not isinstance(term, str):
        return term
    name = term.removeprefix("-")
    return OrderBy(Coalesce(F(name), F(name)), descending=term.startswith("-"))


class GuardedListAdmin(admin.ModelAdmin):
    """A ``ModelAdmin`` whose list is a :class:`GuardedChangeList`.

    ``list_orderings`` names the sortable columns; ``list_statement_timeout`` (seconds, or
    None for no limit) bounds every statement of a list page; ``list_narrowing_hint`` is
    what the page says when that limit stopped it. A list page (GET) reads
    ``PQJOBS["READ_DATABASE"]``; every other page, and every action, ``DATABASE``.
    """

    list_orderings: Orderings = {}
    list_statement_timeout: float | None = 2.0
    list_narrowing_hint = "Narrow it with a filter or a search."
    show_facets = admin.ShowFacets.NEVER

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return GuardedChangeList

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        return super().get_queryset(request).using(self.database_for(request))

    def database_for(self, request: HttpRequest) -> str:
        """The alias this request reads: ``READ_DATABASE`` (a replica, perhaps a little
        behind) for the list itself, ``DATABASE`` for a job's page, and for an action,
        whose rows must be as they are now."""
        match = getattr(request, "resolver_match", None)
        opts = self.model._meta
        listing = match is not None and match.url_name == (
            f"{opts.app_label}_{opts.model_name}_changelist"
        )
        reading = listing and request.method in ("GET", "HEAD")
        return conf.READ_DATABASE if reading else conf.DATABASE

    def list_rows(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        """The list's rows from its filtered, sorted queryset: what columns to read."""
        return queryset

    def get_sortable_by(self, request: HttpRequest) -> list[Any]:
        return list(self.list_orderings)

    def get_changelist_instance(self, request: HttpRequest) -> ChangeList:
        try:
            return super().get_changelist_instance(request)
        except IncorrectLookupParameters as exc:
            reason = exc.args[0] if exc.args else None
            if isinstance(reason, ValidationError):
                text = " ".join(reason.messages)
            else:
                text = str(reason or "no such page")
            raise RefusedQuery(f"The list cannot apply these parameters: {text}") from None

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        alias = self.get_queryset(request).db
        # Reads only: actions (POST) change rows by id and must not be cut short.
        seconds = self.list_statement_timeout if request.method in ("GET", "HEAD") else None
        try:
            with statement_timeout(alias, seconds):
                response = super().changelist_view(request, extra_context)
                render = getattr(response, "render", None)
                if render is not None:
                    render()  # the result rows are read while rendering, so here
                return response
        except RefusedQuery as exc:
            return self.list_refusal(request, str(exc), status=400)
        except OperationalError as exc:
            if not was_cancelled(exc):
                raise
            after = f" after {seconds:g} s" if seconds is not None else ""
            return self.list_refusal(
                request,
                f"The database stopped this list{after} (statement timeout). "
                f"{self.list_narrowing_hint}",
                status=503,
            )

    def list_refusal(self, request: HttpRequest, reason: str, status: int) -> HttpResponse:
        """The page shown instead of a list the URL cannot have."""
        opts = self.model._meta
        context = {
            **self.admin_site.each_context(request),
            "title": f"This {opts.verbose_name} list cannot be shown",
            "reason": reason,
            "opts": opts,
        }
        response = TemplateResponse(
            request, "admin/django_pqjobs/refused.html", context, status=status
        )
        return response.render()
