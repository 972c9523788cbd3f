"""A paginator that does not COUNT(*) a table of millions of rows on every page view."""

from __future__ import annotations

import json
from typing import Any, cast

from django.core.paginator import Paginator
from django.db import OperationalError, connections, transaction
from django.utils.functional import cached_property

from .changelist import was_cancelled

EXACT_BELOW = 10_000


class EstimatedCountPaginator(Paginator):
    """Counts exactly when the planner expects few rows, else uses the planner's estimate.

    The estimate comes from ``EXPLAIN`` of the same query, so it respects the filters; page
    links past the real end simply show an empty page. Below ``EXACT_BELOW`` expected rows
    the paginator counts, first no further than ``EXACT_BELOW + 1`` rows (a bounded cost);
    only when the planner was wrong by that much does it count them all. A count stopped by
    the statement timeout falls back to what is known: the rows the bounded count saw, or
    the estimate; ``exact`` then says False (see ``GuardedChangeList.get_results``). Pages
    go up to ``max_pages``: deeper ones cost an OFFSET over everything before them.
    """

    max_pages = 1000
    exact = True

    @cached_property
    def count(self) -> int:
        queryset: Any = self.object_list
        estimate = self._estimate(queryset)
        if estimate is not None and estimate >= EXACT_BELOW:
            self.exact = False
            return estimate
        seen = None
        try:
            with transaction.atomic(using=queryset.db):  # a savepoint to fall back from
                seen = int(queryset[: EXACT_BELOW + 1].count())
                if seen <= EXACT_BELOW:
                    return seen
                # The planner cannot estimate some filters (a job's dependents are an
                # array of ids): they are counted, as far as the time limit allows.
                return int(queryset.count())
        except OperationalError as exc:
            if (seen is None and estimate is None) or not was_cancelled(exc):
                raise
            self.exact = False
            return seen if seen is not None else cast(int, estimate)

    @cached_property
    def num_pages(self) -> int:
        return min(super().num_pages, self.max_pages)

    def _estimate(self, queryset: Any) -> int | None:
        try:
            sql, params = queryset.query.sql_with_params()
        except Exception:
            return None
        with connections[queryset.db].cursor() as cursor:
            cursor.execute(f"EXPLAIN (FORMAT JSON) {sql}", params)
            plan = cursor.fetchone()[0]
        if isinstance(plan, str):
            plan = json.loads(plan)
        return int(plan[0]["Plan"]["Plan Rows"])
