# Sourced by demo.sh and test.sh: create .venv (Python 3.11+) and install the project into it.
# Re-installs only when pyproject.toml changed since the last install.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
EXTRAS="${1:-test}"

pick_python() {
    for candidate in python3 python3.13 python3.12 python3.11; do
        if command -v "$candidate" >/dev/null 2>&1 &&
            "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
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
STAMP="$VENV/.installed-$EXTRAS"
if [ ! -f "$STAMP" ] || [ "$ROOT/pyproject.toml" -nt "$STAMP" ]; then
    echo "==> installing django-pqjobs[$EXTRAS] into .venv"
    "$VENV/bin/python" -m pip install --quiet --upgrade pip
    "$VENV/bin/python" -m pip install --quiet -e "$ROOT[$EXTRAS]"
    touch "$STAMP"
fi
PY="$VENV/bin/python"
