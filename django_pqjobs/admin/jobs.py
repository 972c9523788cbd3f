"""Admin for jobs: list, filters, actions (Retry, Cancel, Run now, Delete, Release), job
page, dashboard (with flow control: Pause and Resume).

Every action is an operator action of ``operations.py``: one conditional statement of the
state machine (``transitions/``), so it never overwrites what a worker did meanwhile, and
a row of the audit trail under the user's name. Jobs in a status the action does not apply
to are reported as skipped. Nothing else writes a job: the job page is read-only and refuses
POST. The list is guarded (``changelist.py``), reads no result and no payload but a small
task's (its call), and the job page reads only excerpts of them (``excerpts.py``); who sees
that data at all is ``PQJOBS['ADMIN_DATA_PERMISSION']``. The job page links the job's
batch, the batch it is a callback of, its dependencies and its dependents
(``composition.py``), and the list filters by each of them.

``JobAdmin`` composes its parts, each a module: the list (``joblist.py``), the job page
(``jobpage.py``; its fields ``jobfields.py`` and ``jobrecord.py``; what it reads besides
the row, ``jobfacts.py``), the operator's actions and their views (``jobactions.py``) and
the dashboard (``jobdashboard.py``). It keeps the permissions and the URLs of its views.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest
from django.urls import URLPattern, path

from ..models import Job
from .jobactions import JobActions
from .jobdashboard import JobDashboard
from .jobfields import JobPageFields
from .joblist import JobList
from .jobpage import JobPage
from .jobrecord import JobRecordFields


@admin.register(Job)
class JobAdmin(JobPage, JobPageFields, JobRecordFields, JobActions, JobDashboard, JobList):
    """The jobs in the admin, composed of its parts (no method is defined in two of them).
    The list comes last: its base, ``GuardedListAdmin``, then stands after every part."""

    # --- permissions: read-only; actions need the change permission -----------------------

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # A running job is never deleted: its worker would go on with a row that is gone.
        if obj is not None and getattr(obj, "status", None) == "running":
            return False
        return super().has_delete_permission(request, obj)

    # --- the URLs of its own views: the dashboard's, and the job page's buttons ------------

    def get_urls(self) -> list[URLPattern]:
        own = [
            path(
                "dashboard/",
                self.admin_site.admin_view(self.dashboard_view),
                name="django_pqjobs_job_dashboard",
            ),
            path(
                "dashboard/<str:verb>/",
                self.admin_site.admin_view(self.pause_view),
                name="django_pqjobs_job_pause",
            ),
            path(
                "<int:job_id>/action/<str:action>/",
                self.admin_site.admin_view(self.object_action),
                name="django_pqjobs_job_action",
            ),
            path(
                "<int:job_id>/release/",
                self.admin_site.admin_view(self.release_view),
                name="django_pqjobs_job_release",
            ),
            path(
                "<int:job_id>/signal/",
                self.admin_site.admin_view(self.signal_view),
                name="django_pqjobs_job_signal",
            ),
        ]
        return own + super().get_urls()
