"""``manage.py failed_jobs``: list failed jobs, and retry or cancel them in bulk."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.core.management.base import CommandError, CommandParser
from django.db.models import Q, QuerySet
from django.db.models.functions import Now

from ... import operations
from ...flow import undeclared
from ...models import Job
from ...printable import counted, printable
from ._arguments import add_by, duration, positive_int, queue_name, who
from ._base import PQJobsCommand, iso

# What --status selects: the dead letters, the cancelled, the expired (not started by their
# deadline), or ready jobs whose last attempt failed and that wait for their retry.
STATUSES = {
    "failed": (Q(status="failed"), "finished_at"),
    "cancelled": (Q(status="cancelled"), "finished_at"),
    "expired": (Q(status="expired"), "finished_at"),
    "retrying": (Q(status="ready") & ~Q(last_error=""), "updated_at"),
}
LISTED_BY_DEFAULT = 50
BATCH = 1000


class Command(PQJobsCommand):
    help = (
        "List failed jobs (newest first), filtered by type, queue, age and error text; "
        "--retry puts them back to ready (jobs waiting for a retry: due now), --cancel "
        "cancels jobs waiting for a retry. --dry-run shows what would change."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--status",
            choices=sorted(STATUSES),
            default="failed",
            help="failed (default: the dead letters), cancelled, or retrying (ready jobs "
            "whose last attempt failed, waiting for their backoff)",
        )
        parser.add_argument("--type", dest="job_type", default=None, help="this job type only")
        parser.add_argument("--queue", "-q", type=queue_name, default=None, help="this queue only")
        parser.add_argument(
            "--older-than",
            type=duration,
            default=None,
            help="failed (or last tried) longer ago than this, e.g. 2h",
        )
        parser.add_argument(
            "--newer-than",
            type=duration,
            default=None,
            help="failed (or last tried) within this, e.g. 1d",
        )
        parser.add_argument(
            "--error",
            default=None,
            help="text the error or its type contains (case-insensitive)",
        )
        parser.add_argument(
            "--limit",
            type=positive_int,
            default=None,
            help=f"at most this many jobs (default: list {LISTED_BY_DEFAULT}, act on all)",
        )
        action = parser.add_mutually_exclusive_group()
        action.add_argument(
            "--retry",
            action="store_true",
            help="failed/cancelled: back to ready now with attempts reset (the history is "
            "kept); retrying: due now",
        )
        action.add_argument("--cancel", action="store_true", help="cancel jobs waiting for a retry")
        parser.add_argument(
            "--dry-run", action="store_true", help="show what --retry/--cancel would change"
        )
        add_by(parser, "retries and cancels")
        parser.add_argument(
            "--no-input",
            "--noinput",
            dest="interactive",
            action="store_false",
            help="do not ask for confirmation (without it --retry and --cancel ask, and "
            "act only on 'yes')",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        alias = self.alias(options)
        status = options["status"]
        if options["cancel"] and status != "retrying":
            raise CommandError(
                f"--cancel applies to jobs waiting for a retry (--status retrying); {status} "
                "jobs are already finished"
            )
        jobs = self._select(alias, options)
        acting = options["retry"] or options["cancel"]
        limit = options["limit"] or (None if acting else LISTED_BY_DEFAULT)
        total = jobs.count()
        chosen = list(jobs[:limit]) if limit else list(jobs)
        verb = "retry" if options["retry"] else "cancel"
        self.summary(self._headline(total, len(chosen), status, acting, verb, options["dry_run"]))
        if not total and options["job_type"]:
            why = undeclared("job_type", options["job_type"], alias)
            if why is not None:  # a likely typo: name the closest known type
                self.warning(printable(why))
        for job in chosen:
            self.detail_or_summary(self._line(job, status), acting)
        if not acting or not chosen or options["dry_run"]:
            return
        if options["interactive"]:
            self._confirm(f"{verb.capitalize()} {counted(len(chosen), 'job')}?", verb)
        changed = self._act(
            alias, [job.pk for job in chosen], status, options["retry"], who(options)
        )
        done = "put back to ready" if options["retry"] else "cancelled"
        if options["retry"] and status == "retrying":
            done = "made due now"
        skipped = len(chosen) - changed
        tail = f"; {skipped} skipped (their status changed meanwhile)" if skipped else ""
        self.summary(f"{counted(changed, 'job')} {done}{tail}")

    def _confirm(self, question: str, verb: str) -> None:
        """Ask as Django's own commands do (``flush``, ``collectstatic``): only ``yes``,
        typed in full, goes on; anything else, or no answer, changes nothing (exit 1)."""
        try:
            answer = input(f"{question}\n\nType 'yes' to continue, or 'no' to cancel: ")
        except EOFError:
            raise CommandError(
                f"{verb} cancelled: no answer to the confirmation (the input is closed); pass "
                "--no-input to act without asking"
            ) from None
        if answer != "yes":
            raise CommandError(f"{verb} cancelled: nothing changed")

    def detail_or_summary(self, line: str, acting: bool) -> None:
        """Listing is the point without an action; with one, the jobs are detail (-v 2)."""
        if acting:
            self.detail(line)
        else:
            self.summary(line)

    def _select(self, alias: str, options: dict[str, Any]) -> QuerySet[Job]:
        condition, age_field = STATUSES[options["status"]]
        jobs = Job.objects.using(alias).filter(condition).order_by("-id")
        if options["job_type"]:
            jobs = jobs.filter(job_type=options["job_type"])
        if options["queue"]:
            jobs = jobs.filter(queue=options["queue"])
        if options["older_than"] is not None:
            cutoff = Now() - timedelta(seconds=options["older_than"])
            jobs = jobs.filter(**{f"{age_field}__lt": cutoff})
        if options["newer_than"] is not None:
            cutoff = Now() - timedelta(seconds=options["newer_than"])
            jobs = jobs.filter(**{f"{age_field}__gte": cutoff})
        if options["error"]:
            text = options["error"]
            jobs = jobs.filter(Q(last_error__icontains=text) | Q(error_type__icontains=text))
        return jobs.only(
            "id", "job_type", "queue", "attempts", "max_attempts", "last_error", "error_type",
            "finished_at", "updated_at", "run_after", "status",
        )  # fmt: skip

    def _headline(
        self, total: int, shown: int, status: str, acting: bool, verb: str, dry_run: bool
    ) -> str:
        matching = counted(total, f"{status} job") + (" matches" if total == 1 else " match")
        if not acting:
            more = f" (showing the newest {shown}; --limit to see more)" if shown < total else ""
            return f"{matching}{more}"
        prefix = "dry run: would " if dry_run else "about to "
        return f"{matching}; {prefix}{verb} {shown}"

    def _line(self, job: Job, status: str) -> str:
        error = (job.last_error.strip().splitlines() or [job.error_type or "-"])[-1][:160]
        when = job.finished_at if status != "retrying" else job.updated_at
        extra = f" next try {iso(job.run_after)}" if status == "retrying" else ""
        return printable(
            f"#{job.pk} {job.job_type} queue={job.queue} attempts={job.attempts}/"
            f"{job.max_attempts} {'at ' + iso(when) if when else ''}{extra}: {error}"
        )

    def _act(self, alias: str, ids: list[int], status: str, retry: bool, by: str) -> int:
        changed = 0
        for start in range(0, len(ids), BATCH):
            batch = ids[start : start + BATCH]
            if retry and status == "retrying":
                changed += len(operations.run_jobs_now(batch, by=by, using=alias))
            elif retry:
                changed += len(operations.retry_jobs(batch, by=by, using=alias))
            else:
                changed += len(operations.cancel_jobs(batch, by=by, using=alias).cancelled)
        return changed
