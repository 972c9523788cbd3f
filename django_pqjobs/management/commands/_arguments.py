"""Argument types shared by the management commands (clear errors for bad flags)."""

from __future__ import annotations

import argparse

from ...durations import parse_duration


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


def queue_name(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError("queue name must not be empty")
    return text
