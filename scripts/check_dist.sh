#!/usr/bin/env bash
# CI check of the install from a built wheel (docs/quickstart.md): build the sdist and the
# wheel as a release would (the wheel from the sdist), check that both hold every file of the
# package (templates, SQL files, migrations, py.typed) and the sdist the changelog, license
# and docs, that `twine check` passes and the wheel's metadata is complete (version,
# license, project URLs, a classifier for each supported Python and Django, known to PyPI's
# trove-classifiers), install the wheel into a clean
# virtualenv, and in a throwaway project made by `django-admin startproject` run `migrate`,
# `check`, `makemigrations --check`, render the admin templates and drain a job with
# `run_jobs --burst`. The database: this checkout's `..._dist` (scripts/devdb.py), recreated.
#   bash scripts/check_dist.sh
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
source scripts/_venv.sh "test,lint"
started=$SECONDS

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
run_logged() {
    if ! "$@" >"$WORK/step.log" 2>&1; then
        cat "$WORK/step.log"
        echo "FAILED: $*" >&2
        exit 1
    fi
}

echo "==> building the sdist and the wheel"
if ! "$PY" -c 'import build' 2>/dev/null; then
    run_logged "$PY" -m pip install --quiet --disable-pip-version-check build
fi
run_logged "$PY" -m build --outdir "$WORK/dist" "$ROOT"
ls "$WORK"/dist

echo "==> checking their contents against the package's files"
git ls-files django_pqjobs | "$PY" -c '
import sys, tarfile, zipfile
from pathlib import Path
dist = Path(sys.argv[1])
package = {line.strip() for line in sys.stdin if not line.endswith(".pyc\n")}
[wheel], [sdist] = dist.glob("*.whl"), dist.glob("*.tar.gz")
in_wheel = set(zipfile.ZipFile(wheel).namelist())
with tarfile.open(sdist) as archive:
    in_sdist = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
problems = [f"{wheel.name} lacks {name}" for name in sorted(package - in_wheel)]
problems += [f"{sdist.name} lacks {name}" for name in sorted(package - in_sdist)]
problems += [f"{wheel.name} holds {name}" for name in sorted(in_wheel)
             if name.split("/")[0] in ("tests", "testproject", "benchmarks", "scripts")]
kinds = {"templates": "/templates/", "migrations": "/migrations/0"}
for kind, marker in kinds.items():
    if not any(marker in name for name in package):
        problems.append(f"the package has no {kind}?")
for name in ("CHANGELOG.md", "LICENSE", "README.md", "docs/reference/compatibility.md"):
    if name not in in_sdist:
        problems.append(f"{sdist.name} lacks {name}")
for kind, pattern in (("SQL files", "django_pqjobs/sql/"), ("templates", "/templates/")):
    if not any(pattern in name for name in in_wheel if name.endswith((".sql", ".html"))):
        problems.append(f"{wheel.name} has no {kind}")
if problems:
    sys.exit("\n".join(problems))
print(f"{len(package)} package files in both; no tests or scripts in the wheel; the sdist "
      "has the changelog, the license and the docs")
' "$WORK/dist"

echo "==> twine check and the wheel's metadata"
"$(command -v python3)" -m venv "$WORK/tools"
run_logged "$WORK/tools/bin/python" -m pip install --quiet --disable-pip-version-check \
    twine trove-classifiers
run_logged "$WORK/tools/bin/twine" check --strict "$WORK"/dist/*
"$WORK/tools/bin/python" - "$WORK/dist" <<'METADATA'
import sys
import tomllib
import zipfile
from email.parser import Parser
from pathlib import Path

from trove_classifiers import classifiers as known

[wheel] = Path(sys.argv[1]).glob("*.whl")
with zipfile.ZipFile(wheel) as archive:
    [name] = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
    meta = Parser().parsestr(archive.read(name).decode())
project = tomllib.loads(Path("pyproject.toml").read_text())["project"]
declared = meta.get_all("Classifier") or []
urls = dict(line.split(", ", 1) for line in meta.get_all("Project-URL") or [])
problems = [f"unknown classifier {c!r}" for c in declared if c not in known]
if meta["Version"] != project["version"]:
    problems.append(f"version {meta['Version']} is not pyproject's {project['version']}")
if meta["License-Expression"] != "MIT":
    problems.append(f"License-Expression: {meta['License-Expression']!r}")
if "LICENSE" not in (meta.get_all("License-File") or []):
    problems.append("no License-File: LICENSE")
for label in ("Homepage", "Documentation", "Changelog", "Issues"):
    if not urls.get(label, "").startswith("https://"):
        problems.append(f"no Project-URL {label}")
if meta["Description-Content-Type"] != "text/markdown" or not meta.get_payload().strip():
    problems.append("no Markdown long description")
for prefix in ("Programming Language :: Python :: 3.", "Framework :: Django :: "):
    if not any(c.startswith(prefix) for c in declared):
        problems.append(f"no classifier {prefix}*")
if problems:
    sys.exit("\n".join(problems))
print(f"{wheel.name}: twine check passed; version {meta['Version']}, license MIT, "
      f"{len(declared)} known classifiers, project URLs {', '.join(sorted(urls))}")
METADATA

echo "==> installing the wheel into a clean virtualenv"
"$(command -v python3)" -m venv "$WORK/venv"
run_logged "$WORK/venv/bin/python" -m pip install --quiet --disable-pip-version-check \
    "$WORK"/dist/*.whl

DATABASE_URL="$(env -u DATABASE_URL "$PY" scripts/devdb.py url --prefer system --suffix dist)"
export DATABASE_URL
"$PY" - <<'RECREATE'
import os
from urllib.parse import urlsplit

import psycopg

url = urlsplit(os.environ["DATABASE_URL"])
name = url.path.lstrip("/")
with psycopg.connect(
    host=url.hostname, port=url.port, user=url.username, dbname="postgres", autocommit=True
) as conn:
    conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    conn.execute(f'CREATE DATABASE "{name}"')
RECREATE
echo "==> a throwaway project with the installed wheel: $DATABASE_URL"
cd "$WORK"
"$WORK/venv/bin/django-admin" startproject throwaway
cat >>throwaway/throwaway/settings.py <<'SETTINGS'

# added by scripts/check_dist.sh, as docs/quickstart.md says
import os
from urllib.parse import urlsplit

INSTALLED_APPS += ["django_pqjobs", "hello"]
_url = urlsplit(os.environ["DATABASE_URL"])
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": _url.path.lstrip("/"),
        "USER": _url.username,
        "HOST": _url.hostname,
        "PORT": _url.port,
    }
}
SETTINGS
cd throwaway
# One app with one handler, as docs/quickstart.md's "Write a job" says.
mkdir hello
touch hello/__init__.py
cat >hello/jobs.py <<'JOBS'
from django_pqjobs import job


@job("hello.greet")
def greet(ctx):
    return {"greeting": "hello " + ctx.job.payload["from"]}
JOBS
MANAGE=("$WORK/venv/bin/python" manage.py)
run_logged "${MANAGE[@]}" migrate
grep -E "Applying django_pqjobs" "$WORK/step.log"
run_logged "${MANAGE[@]}" check --fail-level WARNING
run_logged "${MANAGE[@]}" makemigrations --check --dry-run django_pqjobs
run_logged "${MANAGE[@]}" shell -c '
import django_pqjobs
from django.template.loader import get_template
from django_pqjobs import enqueue_job
from django_pqjobs.errors import UnknownJobType

assert "site-packages" in django_pqjobs.__file__, django_pqjobs.__file__
print("django_pqjobs", django_pqjobs.__version__)
for name in ("admin/django_pqjobs/job/dashboard.html", "admin/django_pqjobs/job/change_form.html"):
    get_template(name)
try:
    enqueue_job("no.such.handler", {"from": "the wheel"})
except UnknownJobType as refused:
    print("refused:", refused)
else:
    raise AssertionError("a job type without a handler was enqueued")
print("job", enqueue_job("hello.greet", {"from": "the wheel"}))
'
run_logged "${MANAGE[@]}" run_jobs --burst --concurrency 1
run_logged "${MANAGE[@]}" shell -c '
from django_pqjobs.models import Job
job = Job.objects.get()
assert job.status == "done" and job.result == {"greeting": "hello the wheel"}, (job.status, job.result, job.last_error)
'
"$PY" - <<'DROP'
import os
from urllib.parse import urlsplit

import psycopg

url = urlsplit(os.environ["DATABASE_URL"])
with psycopg.connect(
    host=url.hostname, port=url.port, user=url.username, dbname="postgres", autocommit=True
) as conn:
    conn.execute(f'DROP DATABASE IF EXISTS "{url.path.lstrip("/")}" WITH (FORCE)')
DROP
echo "==> the wheel installs, migrates and runs a job in a clean virtualenv ($((SECONDS - started)) s)"
