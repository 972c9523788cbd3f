"""CHANGELOG.md, the version and the supported versions.

The upgrading notes run as written: the INSERT older docs showed fails on a migrated
database with the error the changelog quotes, and the replacement it gives enqueues once
however often it runs (a pg_cron job retried, run twice a day). The version is declared
once (pyproject.toml), and ``django_pqjobs.__version__``, the installed metadata and the
changelog's newest release agree with it; every migration is in a release; the package's
classifiers say what docs/reference/compatibility.md, the one statement of the supported
versions, says."""

from __future__ import annotations

import importlib.metadata
import re
import tomllib
from pathlib import Path

import pytest
from django.db import DatabaseError, connection, transaction

import django_pqjobs
from django_pqjobs.models import Job
from tests.helpers import ROOT, documented_sql

DOC = "../CHANGELOG.md"  # documented_sql reads docs/<doc>
CHANGELOG = (ROOT / "CHANGELOG.md").read_text()
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
COMPATIBILITY = (ROOT / "docs/reference/compatibility.md").read_text()
RELEASE = re.compile(r"^## \[(\d+)\.(\d+)\.(\d+)\] - (\d{4}-\d{2}-\d{2})$", re.MULTILINE)


@pytest.mark.django_db(transaction=True)
def test_the_old_on_conflict_insert_fails_with_the_error_the_changelog_quotes():
    old = documented_sql(DOC, "old-on-conflict")
    assert "ON CONFLICT (job_type, dedupe_key)" in old
    error = "there is no unique or exclusion constraint matching the ON CONFLICT specification"
    assert error in (ROOT / "CHANGELOG.md").read_text()
    with (
        pytest.raises(DatabaseError, match=error),
        transaction.atomic(),
        connection.cursor() as cursor,
    ):
        cursor.execute(old)
    assert Job.objects.count() == 0


@pytest.mark.django_db(transaction=True)
def test_the_replacement_enqueues_once_on_repeat():
    replacement = documented_sql(DOC, "enqueue-from-sql")
    with connection.cursor() as cursor:
        cursor.execute(replacement)
        (job_id,) = cursor.fetchone()
        cursor.execute(replacement)
        assert cursor.fetchone() == (None,)  # the key is held: nothing enqueued
    job = Job.objects.get()
    assert (job.pk, job.job_type, job.status) == (job_id, "cleanup", "ready")
    assert job.dedupe_key.startswith("cleanup:")


# --- the version ---------------------------------------------------------------------------


def releases() -> list[tuple[tuple[int, int, int], str, str]]:
    """Each release of the changelog: its version, its date and its section's text."""
    found = list(RELEASE.finditer(CHANGELOG))
    ends = [match.start() for match in found[1:]] + [len(CHANGELOG)]
    return [
        ((int(m[1]), int(m[2]), int(m[3])), m[4], CHANGELOG[m.start() : end])
        for m, end in zip(found, ends, strict=True)
    ]


def test_the_version_is_declared_once_and_everything_agrees_with_it():
    declared = PROJECT["version"]
    assert re.fullmatch(r"\d+\.\d+\.\d+", declared), declared
    assert django_pqjobs.__version__ == declared
    assert importlib.metadata.version("django-pqjobs") == declared  # reinstalled: scripts/_venv.sh
    (newest, _, _), *_ = releases()
    assert ".".join(map(str, newest)) == declared, "pyproject's version is not the newest release"
    assert "version" not in PROJECT.get("dynamic", [])


def test_a_source_tree_never_installed_reads_the_version_from_pyproject(monkeypatch):
    def not_installed(name: str) -> str:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(django_pqjobs, "version", not_installed)
    assert django_pqjobs._version() == PROJECT["version"]
    monkeypatch.setattr(django_pqjobs, "__file__", "/nowhere/django_pqjobs/__init__.py")
    assert django_pqjobs._version() == "0+unknown"


def test_the_releases_are_newest_first_each_with_its_upgrading_notes():
    assert CHANGELOG.index("## [Unreleased]") < RELEASE.search(CHANGELOG).start()
    found = releases()
    versions = [version for version, _, _ in found]
    dates = [date for _, date, _ in found]
    assert versions == sorted(versions, reverse=True) and len(set(versions)) == len(versions)
    assert dates == sorted(dates, reverse=True)
    first = min(versions)
    for version, _, text in found:
        if version != first:  # the first release had nothing to upgrade from
            assert "### Upgrading" in text, f"{version}: no Upgrading section"


def test_every_migration_is_in_the_changelog():
    """A migration changes the schema users upgrade: the changelog names each one, alone
    (0027) or in a range of its release (0005-0013)."""
    named: set[int] = set()
    for first, last in re.findall(r"\b(\d{4})(?:-(\d{4}))?\b", CHANGELOG):
        named.update(range(int(first), int(last or first) + 1))
    migrations = sorted(
        int(path.name[:4]) for path in (ROOT / "django_pqjobs/migrations").glob("[0-9]*.py")
    )
    assert [number for number in migrations if number not in named] == []


def test_the_changelog_s_links_lead_to_docs_pages_or_full_urls():
    """docs/changelog.md includes CHANGELOG.md; the site's build rewrites links to docs/
    pages, and GitHub reads them as they are: both hold only for these two kinds."""
    for target in re.findall(r"\]\(([^)\s]+)\)", CHANGELOG):
        if target.startswith("https://"):
            continue
        path = target.split("#", 1)[0]
        assert path.startswith("docs/") and (ROOT / path).is_file(), target


# --- the supported versions ----------------------------------------------------------------


def matrix() -> dict[str, list[str]]:
    """docs/reference/compatibility.md's table of supported versions."""
    rows = re.findall(r"^\| (Python|Django|PostgreSQL) \| ([\d., ]+) \|$", COMPATIBILITY, re.M)
    assert [name for name, _ in rows] == ["Python", "Django", "PostgreSQL"]
    return {name: [v.strip() for v in versions.split(",")] for name, versions in rows}


def as_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def test_the_package_s_classifiers_say_what_the_compatibility_page_says():
    supported = matrix()
    classifiers = PROJECT["classifiers"]
    pythons = [c.rsplit(" :: ", 1)[1] for c in classifiers if re.search(r"Python :: 3\.\d+$", c)]
    djangos = [c.rsplit(" :: ", 1)[1] for c in classifiers if re.search(r"Django :: \d", c)]
    assert pythons == supported["Python"]
    assert djangos == supported["Django"]
    assert PROJECT["requires-python"] == f">={supported['Python'][0]}"
    (django_requirement,) = [d for d in PROJECT["dependencies"] if re.match(r"django\b", d)]
    assert django_requirement == f"django>={supported['Django'][0]}"
    ascending = [as_tuple(version) for version in supported["Python"]]
    assert ascending == sorted(ascending)


def test_other_pages_that_name_versions_agree_with_the_compatibility_page():
    supported = matrix()
    python, django, postgres = supported["Python"], supported["Django"], supported["PostgreSQL"]
    readme = (ROOT / "README.md").read_text()
    stated = f"Python {python[0]}-{python[-1]}, Django {' / '.join(django)}, "
    stated += f"PostgreSQL {postgres[0]}-{postgres[-1]}"
    assert stated in readme.replace("\n", " ")
    assert "(docs/reference/compatibility.md)" in readme
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    for page in pages:
        for minimum in re.findall(r"PostgreSQL (\d+)\+", page.read_text()):
            assert minimum == postgres[0], f"{Path(page).relative_to(ROOT)}: PostgreSQL {minimum}+"
        for minimum in re.findall(r"Python (3\.\d+)\+", page.read_text()):
            assert minimum == python[0], f"{Path(page).relative_to(ROOT)}: Python {minimum}+"
        for named in re.findall(r"django_pqjobs-(\d+\.\d+\.\d+)-py3", page.read_text()):
            assert named == PROJECT["version"], f"{page.relative_to(ROOT)}: a wheel of {named}"
