#!/usr/bin/env bash
# README command 1: the demo. Creates .venv, starts this checkout's own PostgreSQL (unless
# DATABASE_URL is set; see scripts/devdb.py), migrates, runs sample jobs through a worker and prints what happened,
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
source scripts/_venv.sh "demo"

# Without DATABASE_URL, this checkout's own PostgreSQL (devdb.py): the machine's binaries, or
# on a machine without PostgreSQL the binaries of the `pgserver` wheel, downloaded into .venv.
OWN_DATABASE=0
if [ -z "${DATABASE_URL:-}" ]; then
    OWN_DATABASE=1
    DATABASE_URL="$("$PY" scripts/devdb.py url --prefer local)"
fi
export DATABASE_URL
echo "==> database: $DATABASE_URL"
MANAGE=("$PY" testproject/manage.py)
if [ "$OWN_DATABASE" = 0 ]; then
    # A DATABASE_URL that leads nowhere: one line, not migrate's traceback.
    "${MANAGE[@]}" shell -v 0 -c "
import sys
from django_pqjobs import DatabaseNotReady, schema
try:
    schema.require_reachable('default')
except DatabaseNotReady as exc:
    sys.exit(f'error: {exc}; fix DATABASE_URL, or unset it: the demo then runs a PostgreSQL of its own')
"
fi
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
Dashboard: http://127.0.0.1:8000/admin/django_pqjobs/job/dashboard/
INFO
if [ "$OWN_DATABASE" = 1 ]; then
    echo "Stop this checkout's database later with: .venv/bin/python scripts/devdb.py stop"
    echo "(or delete it, and its data, with: .venv/bin/python scripts/devdb.py drop)"
fi

if [ "$SERVE" = 0 ]; then
    exit 0
fi
# The worker in a process group of its own (set -m): Ctrl-C goes to the terminal's group
# only, so the worker hears of it once, from the trap, not twice (a second signal makes it
# exit at once, leaving its jobs running).
set -m
"${MANAGE[@]}" run_jobs --concurrency 2 &
WORKER=$!
set +m
trap 'kill -TERM $WORKER 2>/dev/null; wait $WORKER 2>/dev/null' EXIT
echo "==> worker running (pid $WORKER); starting the web server, Ctrl-C to stop both"
"${MANAGE[@]}" runserver 127.0.0.1:8000
