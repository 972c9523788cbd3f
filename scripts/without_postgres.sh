#!/usr/bin/env bash
# Run a command as on a machine without PostgreSQL: in a private mount namespace where
# PostgreSQL's binaries, Debian's postgresql-common wrappers, /etc/postgresql and the
# 'postgres' user are hidden. Nothing changes outside the namespace. Needs root (unshare).
#   bash scripts/without_postgres.sh bash scripts/demo.sh --no-serve
# The machine's server, if one runs, stays reachable over TCP: only its programs are gone.
set -euo pipefail

if [ "${1:-}" != "--inside" ]; then
    if [ $# -eq 0 ]; then
        echo "usage: bash scripts/without_postgres.sh COMMAND [ARGS...]" >&2
        exit 2
    fi
    if [ "$(id -u)" -ne 0 ] || ! command -v unshare >/dev/null 2>&1; then
        echo "without_postgres.sh: needs root and unshare(1) to make a mount namespace" >&2
        exit 2
    fi
    # A scratch directory for the namespace's own files (a tmpfs is mounted on it inside).
    SCRATCH="$(mktemp -d)"
    status=0
    unshare --mount --propagation private bash "${BASH_SOURCE[0]}" --inside "$SCRATCH" "$@" ||
        status=$?
    rmdir "$SCRATCH"
    exit "$status"
fi
SCRATCH="$2"
shift 2

mount -t tmpfs -o size=1m tmpfs "$SCRATCH"
: >"$SCRATCH/absent"
chmod 0644 "$SCRATCH/absent"

# Whole directories: the server binaries, the wrappers' code, the clusters' configuration.
for dir in /usr/lib/postgresql /usr/share/postgresql-common /usr/share/postgresql /etc/postgresql; do
    if [ -d "$dir" ]; then mount -t tmpfs -o size=1m,mode=0755 tmpfs "$dir"; fi
done
# Programs left on the PATH (pg_ctlcluster and friends, copies, symlinks to elsewhere):
# covered by an empty, non-executable file. Symlinks into the directories above now dangle.
IFS=: read -r -a path_dirs <<<"$PATH"
for dir in "${path_dirs[@]}" /usr/sbin /usr/local/sbin; do
    [ -d "$dir" ] || continue
    for program in "$dir"/pg_* "$dir"/psql "$dir"/initdb "$dir"/postgres "$dir"/postmaster \
        "$dir"/createdb "$dir"/dropdb "$dir"/createuser "$dir"/dropuser "$dir"/pgbench; do
        [ -e "$program" ] || continue
        mount --bind "$SCRATCH/absent" "$program"
    done
done
# No 'postgres' user either, as in a fresh container.
grep -v '^postgres:' /etc/passwd >"$SCRATCH/passwd"
grep -v '^postgres:' /etc/group >"$SCRATCH/group"
mount --bind "$SCRATCH/passwd" /etc/passwd
mount --bind "$SCRATCH/group" /etc/group

# Prove it: nothing a script could find.
python3 - <<'CHECK'
import glob, pwd, shutil, sys
found = [p for p in ("initdb", "pg_ctl", "postgres", "pg_isready", "psql", "pg_ctlcluster")
         if shutil.which(p)]
found += glob.glob("/usr/lib/postgresql/*/bin/*")
try:
    pwd.getpwnam("postgres")
    found.append("user postgres")
except KeyError:
    pass
if found:
    sys.exit(f"without_postgres.sh: could not hide {found}")
CHECK
echo "==> PostgreSQL hidden: no initdb, pg_ctl, postgres, pg_isready, psql, no 'postgres' user"
exec "$@"
