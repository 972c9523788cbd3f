#!/usr/bin/env bash
# CI check of README command 1 as a new user meets it: copy this checkout (its tracked and
# untracked files: no .venv, no .pgdata) to a temporary directory, run
# `bash scripts/demo.sh --no-serve` there, then `scripts/devdb.py stop`, and fail unless the
# demo completed, printed its summary, and no postgres process of the copy is left.
#   bash scripts/check_demo.sh                     # with this machine's PostgreSQL binaries
#   bash scripts/check_demo.sh --without-postgres  # as on a machine without PostgreSQL
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
HIDE=()
case "${1:-}" in
    "") ;;
    --without-postgres) HIDE=(bash "$ROOT/scripts/without_postgres.sh") ;;
    *) echo "usage: bash scripts/check_demo.sh [--without-postgres]" >&2; exit 2 ;;
esac

PARENT="$(mktemp -d)"
COPY="$PARENT/checkout"
LOG="$PARENT/demo.log"
leftovers() { pgrep -f -- "$COPY/.pgdata" || true; }
cleanup() {
    local pids
    pids="$(leftovers)"
    if [ -n "$pids" ]; then
        # shellcheck disable=SC2086  # one pid per word
        kill -INT $pids 2>/dev/null || true
        sleep 2
    fi
    rm -rf "$PARENT"
}
trap cleanup EXIT

mkdir "$COPY"
(cd "$ROOT" && git ls-files -z --cached --others --exclude-standard |
    tar --null --ignore-failed-read -T - -cf -) | tar -C "$COPY" -xf -

echo "==> the demo in a fresh copy of the checkout${1:+ ($1)}"
started=$SECONDS
# The demo's own database, not the one of the caller's environment.
if ! (cd "$COPY" && env -u DATABASE_URL "${HIDE[@]}" bash -c \
    'bash scripts/demo.sh --no-serve && .venv/bin/python scripts/devdb.py stop') >"$LOG" 2>&1; then
    cat "$LOG"
    echo "FAILED: the demo did not complete${1:+ ($1)}" >&2
    exit 1
fi
for expected in "4 jobs (3 done, 1 failed) in 6 attempts" "1 run while the demo ran" \
    "devdb: stopped this checkout's server"; do
    if ! grep -qF "$expected" "$LOG"; then
        cat "$LOG"
        echo "FAILED: the demo's output lacks: $expected" >&2
        exit 1
    fi
done
left="$(leftovers)"
if [ -n "$left" ] || [ -e "$COPY/.pgdata/postmaster.pid" ]; then
    cat "$LOG"
    ps -o pid,user,args -p "${left:-1}" || true
    echo "FAILED: a postgres process of the demo is still running after devdb.py stop" >&2
    exit 1
fi
grep -E "^(==> PostgreSQL hidden|devdb:|==> database)" "$LOG" || true
echo "==> the demo completed and stopped cleanly in $((SECONDS - started)) s"
