#!/usr/bin/env bash
# README command 2: lint, type-check and run the whole test suite against real PostgreSQL.
#   bash scripts/test.sh [pytest arguments]
# Uses $DATABASE_URL if set, else the machine's PostgreSQL on 127.0.0.1:5432 (started if it
# is installed but down), else a project-local server (scripts/devdb.py).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
source scripts/_venv.sh "test,lint"

if [ -z "${DATABASE_URL:-}" ] && ! command -v initdb >/dev/null 2>&1 &&
    ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 &&
    ! (command -v pg_isready >/dev/null 2>&1 && pg_isready -q -h 127.0.0.1 -p 5432) &&
    ! "$PY" -c 'import pgserver' >/dev/null 2>&1; then
    echo "==> no PostgreSQL found: installing pgserver into .venv"
    "$PY" -m pip install --quiet pgserver
fi
DATABASE_URL="$("$PY" scripts/devdb.py url --prefer system)"
export DATABASE_URL
echo "==> database: $DATABASE_URL"

step() {
    local name="$1"
    shift
    echo "==> $name"
    if ! "$@"; then
        echo "FAILED: $name" >&2
        exit 1
    fi
}

step "ruff check" "$VENV/bin/ruff" check django_pqjobs tests testproject benchmarks scripts
step "ruff format --check" "$VENV/bin/ruff" format --check django_pqjobs tests testproject benchmarks scripts
step "mypy" "$VENV/bin/mypy"
step "migrations are up to date" "$PY" testproject/manage.py makemigrations --check --dry-run
step "migrations are up to date (test apps)" env DJANGO_SETTINGS_MODULE=tests.settings \
    "$PY" -m django makemigrations --check --dry-run
step "pytest" "$PY" -m pytest "$@"
