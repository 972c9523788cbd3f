"""Management commands without the database: argument errors, --database, output rules."""

from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from django_pqjobs.durations import in_words
from django_pqjobs.printable import counted, printable

COMMANDS = [
    ("run_jobs", []),
    ("reap_stale", []),
    ("prune_jobs", []),
    ("list_schedules", []),
    ("trigger_schedule", ["nightly"]),
    ("pause_jobs", []),
    ("resume_jobs", ["--queue", "q"]),
]


@pytest.mark.parametrize(
    "command, args, message",
    [
        ("run_jobs", ["--concurrency", "0"], "must be at least 1"),
        ("run_jobs", ["--concurrency", "many"], "not a whole number"),
        ("run_jobs", ["--shutdown-timeout", "abc"], "not a duration"),
        ("run_jobs", ["--queue", ""], "queue name must be a non-empty string"),
        ("run_jobs", ["--queue", "q" * 101], "longer than 100 characters"),
        ("pause_jobs", ["--job-type", "a\nb"], "must not contain control characters"),
        ("run_jobs", ["--isolation", "vm"], "invalid choice"),
        ("run_jobs", ["--worker-id", " "], "--worker-id"),
        ("run_jobs", ["--min-priority", "urgent"], r"--min-priority must be a whole number or"),
        ("run_jobs", ["--min-priority", "1.5"], r"LOW, NORMAL, HIGH, CRITICAL"),
        ("reap_stale", ["--older-than", "xyz"], "not a duration"),
    ],
)
def test_bad_command_line_input_is_refused_clearly(command, args, message):
    with pytest.raises(CommandError, match=message):
        call_command(command, *args)


def test_run_jobs_does_nothing_when_disabled(monkeypatch):
    monkeypatch.setenv("WORKER_ENABLED", "0")
    out = StringIO()
    call_command("run_jobs", stdout=out)
    assert "worker disabled" in out.getvalue()


def test_run_jobs_prints_nothing_at_verbosity_0_when_disabled(monkeypatch):
    monkeypatch.setenv("WORKER_ENABLED", "0")
    out = StringIO()
    call_command("run_jobs", verbosity=0, stdout=out)
    assert out.getvalue() == ""


@pytest.mark.parametrize("command, args", COMMANDS)
def test_an_unknown_database_alias_is_refused_naming_it(command, args):
    with pytest.raises(CommandError, match=r"database alias 'nowhere' is not in DATABASES"):
        call_command(command, *args, "--database", "nowhere")


@pytest.mark.parametrize("command, args", COMMANDS)
def test_the_default_alias_comes_from_the_settings(settings, command, args):
    settings.PQJOBS = {**settings.PQJOBS, "DATABASE": "elsewhere"}
    with pytest.raises(CommandError, match=r"database alias 'elsewhere' is not in DATABASES"):
        call_command(command, *args)


@pytest.mark.parametrize(
    "text, shown",
    [
        ("nightly-report", "nightly-report"),
        ("caf\u00e9 \u65e5\u672c", "caf\u00e9 \u65e5\u672c"),
        ("red\x1b[31m", "red\\x1b[31m"),
        ("two\nlines\r", "two\\nlines\\r"),
        ("tab\there", "tab\\there"),
        ("bidi\u202eevil", "bidi\\u202eevil"),
        ("bell\x07", "bell\\x07"),
    ],
)
def test_printable_escapes_control_characters_only(text, shown):
    assert printable(text) == shown


@pytest.mark.parametrize(
    "seconds, words",
    [
        (30 * 86400, "30 days"),
        (7 * 86400.0, "7 days"),
        (365 * 86400, "365 days"),
        (86400, "1 day"),
        (5400, "1 hour 30 minutes"),
        (1200, "20 minutes"),
        (90.5, "1 minute 30.5 seconds"),
        (1, "1 second"),
        (0.25, "0.25 seconds"),
        (0, "0 seconds"),
    ],
)
def test_durations_are_printed_in_words(seconds, words):
    assert in_words(seconds) == words


@pytest.mark.parametrize(
    "count, noun, plural, shown",
    [
        (1, "claim", None, "1 claim"),
        (0, "claim", None, "0 claims"),
        (2, "worker", None, "2 workers"),
        (2592000, "second", None, "2592000 seconds"),
        (1.0, "second", None, "1 second"),
        (1.5, "second", None, "1.5 seconds"),
        (3, "batch", "batches", "3 batches"),
    ],
)
def test_counts_take_the_singular_or_the_plural(count, noun, plural, shown):
    assert counted(count, noun, plural) == shown
