#!/usr/bin/env bash
# README command 2: lint, type-check and run the whole test suite against real PostgreSQL.
#   bash scripts/test.sh [pytest arguments]
# Uses $DATABASE_URL if set, else the machine's PostgreSQL on 127.0.0.1:5432 (started if it
# is installed but down) with a database of this checkout's own (pqjobs_<hash of its path>),
# else this checkout's own server (scripts/devdb.py). pytest-django creates the test database
# test_<that name> beside it and drops it at the end.
# The virtualenv, its Python and its Django come from PQJOBS_VENV, PQJOBS_PYTHON and
# PQJOBS_DJANGO (see scripts/_venv.sh; default: .venv, python3 if it is 3.11+, the newest
# Django it can run). PQJOBS_LINT=0 skips ruff and mypy (CI lints once, on its first line).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
source scripts/_venv.sh "test,lint,tasks"
"$PY" -c 'import django, sys; print(f"==> Python {sys.version.split()[0]}, Django {django.__version__}")'

if [ -z "${DATABASE_URL:-}" ]; then
    DATABASE_URL="$("$PY" scripts/devdb.py url --prefer system)"
fi
export DATABASE_URL
DATABASE_NAME="${DATABASE_URL##*/}"
echo "==> database: $DATABASE_URL (pytest uses test_${DATABASE_NAME%%\?*})"

step() {
    local name="$1"
    shift
    echo "==> $name"
    if ! "$@"; then
        echo "FAILED: $name" >&2
        exit 1
    fi
}

if [ "${PQJOBS_LINT:-1}" != "0" ]; then
    step "ruff check" "$VENV/bin/ruff" check django_pqjobs tests testproject benchmarks scripts
    step "ruff format --check" "$VENV/bin/ruff" format --check django_pqjobs tests testproject benchmarks scripts
    step "mypy" "$VENV/bin/mypy"
fi
step "migrations are up to date" "$PY" testproject/manage.py makemigrations --check --dry-run
step "migrations are up to date (test apps)" env DJANGO_SETTINGS_MODULE=tests.settings \
    "$PY" -m django makemigrations --check --dry-run
# Three test processes, each with databases of its own (pytest-django suffixes them _gw0,
# _gw1...): most tests wait on workers, processes and the database rather than compute, so
# three share two cores well. PQJOBS_TEST_PROCESSES=0 runs them in this process instead.
PROCESSES="${PQJOBS_TEST_PROCESSES:-3}"
if [ "$PROCESSES" = "0" ]; then
    step "pytest" "$PY" -m pytest "$@"
else
    step "pytest ($PROCESSES processes)" "$PY" -m pytest -n "$PROCESSES" "$@"
fi
