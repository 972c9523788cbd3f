# Sourced by demo.sh and test.sh: create a virtualenv (Python 3.11+) and install the project
# into it. Re-installs only when pyproject.toml (or the requested Django) changed since the
# last install. The defaults give `.venv` with the newest Python 3.11+ on PATH; CI's second
# line sets, for example:
#   PQJOBS_VENV=.venv-django6     the virtualenv's path (relative to the repository root)
#   PQJOBS_PYTHON=python3.12      the interpreter that creates it (a name on PATH or a path)
#   PQJOBS_DJANGO='django>=6,<7'  a Django requirement installed with the project
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${PQJOBS_VENV:-.venv}"
[[ "$VENV" = /* ]] || VENV="$ROOT/$VENV"
EXTRAS="${1:-test}"
DJANGO_SPEC="${PQJOBS_DJANGO:-}"

python_ok() {
    command -v "$1" >/dev/null 2>&1 &&
        "$1" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null
}

pick_python() {
    if [ -n "${PQJOBS_PYTHON:-}" ]; then
        if python_ok "$PQJOBS_PYTHON"; then
            echo "$PQJOBS_PYTHON"
            return
        fi
        echo "PQJOBS_PYTHON=$PQJOBS_PYTHON is not a Python 3.11 or newer" >&2
        exit 1
    fi
    for candidate in python3 python3.13 python3.12 python3.11; do
        if python_ok "$candidate"; then
            echo "$candidate"
            return
        fi
    done
    echo "need Python 3.11 or newer (python3 not found or too old)" >&2
    exit 1
}

if [ ! -x "$VENV/bin/python" ]; then
    echo "==> creating $VENV"
    "$(pick_python)" -m venv "$VENV"
fi
STAMP="$VENV/.installed-$EXTRAS-$(printf '%s' "$DJANGO_SPEC" | cksum | cut -d' ' -f1)"
if [ ! -f "$STAMP" ] || [ "$ROOT/pyproject.toml" -nt "$STAMP" ]; then
    echo "==> installing django-pqjobs[$EXTRAS] ${DJANGO_SPEC:+($DJANGO_SPEC) }into $VENV"
    "$VENV/bin/python" -m pip install --quiet --upgrade pip
    # setuptools announces how it makes an editable install of a package beside other
    # folders (an import hook that maps django_pqjobs alone, so tests/ and testproject/ do
    # not become importable) with a banner pip repeats; the hook is what we want, the
    # banner only hides what matters in the output. Other warnings still show.
    # shellcheck disable=SC2086 # DJANGO_SPEC is one requirement or nothing
    PYTHONWARNINGS="ignore:Editable installation" \
        "$VENV/bin/python" -m pip install --quiet -e "$ROOT[$EXTRAS]" ${DJANGO_SPEC:+"$DJANGO_SPEC"}
    touch "$STAMP"
fi
PY="$VENV/bin/python"
