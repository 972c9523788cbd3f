"""What ``pause_jobs`` and ``resume_jobs`` share: the queues and job types to act on."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from ... import flow
from ...printable import printable
from ._arguments import add_by, job_type_name, queue_name
from ._base import PQJobsCommand


def add_targets(parser: CommandParser, verb: str) -> None:
    parser.add_argument(
        "--queue",
        "-q",
        dest="queues",
        action="append",
        type=queue_name,
        default=[],
        help=f"queue to {verb}; repeatable",
    )
    parser.add_argument(
        "--job-type",
        "-t",
        dest="job_types",
        action="append",
        type=job_type_name,
        default=[],
        help=f"job type to {verb} (in every queue); repeatable",
    )
    add_by(parser, f"{verb}s")


def targets(options: dict[str, Any]) -> list[tuple[str, str]]:
    return [("queue", q) for q in options["queues"]] + [
        ("job_type", t) for t in options["job_types"]
    ]


def pause(alias: str, kind: str, name: str, by: str) -> bool:
    pause_one = flow.pause_queue if kind == "queue" else flow.pause_job_type
    return pause_one(name, by=by, using=alias)


def resume(alias: str, kind: str, name: str, by: str) -> int | None:
    resume_one = flow.resume_queue if kind == "queue" else flow.resume_job_type
    return resume_one(name, by=by, using=alias)


def warn_if_undeclared(command: PQJobsCommand, alias: str, kind: str, name: str) -> None:
    """Warn (the pause or resume happens all the same) about a queue or job type nothing
    declares: most likely a typo, which would pause nothing that runs."""
    why = flow.undeclared(kind, name, alias)
    if why is not None:
        command.warning(printable(why))
