"""Argument types shared by the management commands (clear errors for bad flags)."""

from __future__ import annotations

import argparse
import getpass
import os
from typing import Any

from ... import options
from ...durations import parse_duration
from ...options import actor as options_actor


def duration(text: str) -> float:
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


MAX_PROCESSES = 512


def processes_count(text: str) -> int:
    """``--processes``: a whole number from 1 to 512, or ``auto`` (the cores this process
    may run on)."""
    if text.strip().lower() == "auto":
        return len(os.sched_getaffinity(0)) or 1
    value = positive_int(text)
    if value > MAX_PROCESSES:
        raise argparse.ArgumentTypeError(
            f"must be at most {MAX_PROCESSES} (or auto: one per core), got {value}"
        )
    return value


def queue_name(text: str) -> str:
    try:
        return options.queue_name(text, "queue name")
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def actor(text: str) -> str:
    try:
        return options_actor(text, "the name")
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def worker_id(text: str) -> str:
    try:
        return options.worker_id(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def job_type_name(text: str) -> str:
    try:
        return options.job_type_name(text, "job type")
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_by(parser: argparse.ArgumentParser, recorded: str) -> None:
    """``--by``: who acts, for the audit trail."""
    parser.add_argument(
        "--by",
        type=actor,
        default=None,
        help=f"who does it, recorded with the {recorded} in the audit trail the admin shows "
        "(default: the system user running the command)",
    )


def who(options: dict[str, Any]) -> str:
    """``--by``, or the system user running the command."""
    if options["by"] is not None:
        return str(options["by"])
    try:
        return options_actor(getpass.getuser())
    except (KeyError, OSError, ValueError):  # no name for this uid (containers), or odd
        return "manage.py"
