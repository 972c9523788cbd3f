#!/usr/bin/env bash
# README command 1: the demo. Creates .venv, starts a project-local PostgreSQL (unless
# DATABASE_URL is set), migrates, runs sample jobs through a worker and prints what happened,
# then serves the admin with a worker beside it until Ctrl-C.
#   bash scripts/demo.sh [--no-serve]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
SERVE=1
for arg in "$@"; do
    case "$arg" in
        --no-serve) SERVE=0 ;;
        *) echo "usage: bash scripts/demo.sh [--no-serve]" >&2; exit 2 ;;
    esac
done
source scripts/_venv.sh "test"

# No DATABASE_URL and no PostgreSQL binaries on this machine: devdb.py falls back to the
# `pgserver` package (a PostgreSQL in a wheel), installed here into .venv.
if [ -z "${DATABASE_URL:-}" ] && ! command -v initdb >/dev/null 2>&1 &&
    ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 &&
    ! "$PY" -c 'import pgserver' >/dev/null 2>&1; then
    echo "==> no PostgreSQL binaries found: installing pgserver into .venv"
    "$PY" -m pip install --quiet pgserver
fi

DATABASE_URL="$("$PY" scripts/devdb.py url --prefer embedded)"
export DATABASE_URL
echo "==> database: $DATABASE_URL"
MANAGE=("$PY" testproject/manage.py)
"${MANAGE[@]}" migrate --verbosity 0
DJANGO_SUPERUSER_PASSWORD=admin "${MANAGE[@]}" shell -v 0 -c "
from django.contrib.auth import get_user_model
User = get_user_model()
if not User.objects.filter(username='admin').exists():
    User.objects.create_superuser('admin', 'admin@example.com', 'admin')
"
"${MANAGE[@]}" demo

cat <<INFO

The admin: http://127.0.0.1:8000/admin/  (user admin, password admin)
Jobs:      http://127.0.0.1:8000/admin/django_pqjobs/job/
Stop the project-local database later with: .venv/bin/python scripts/devdb.py stop
INFO

if [ "$SERVE" = 0 ]; then
    exit 0
fi
"${MANAGE[@]}" run_jobs --concurrency 2 &
WORKER=$!
trap 'kill -TERM $WORKER 2>/dev/null; wait $WORKER 2>/dev/null' EXIT
echo "==> worker running (pid $WORKER); starting the web server, Ctrl-C to stop both"
"${MANAGE[@]}" runserver 127.0.0.1:8000
