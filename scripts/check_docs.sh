#!/usr/bin/env bash
# CI check of the documentation site (mkdocs.yml over docs/, CHANGELOG.md included): build it
# with --strict, where mkdocs.yml's `validation` makes every broken link, missing anchor and
# page left out of the nav an error, and so does an API reference (docs/reference/
# python-api.md) that names no object of the package. Then scripts/check_docs_site.py: the
# README's links and anchors into docs/, and an API reference that documents every export.
#   bash scripts/check_docs.sh
# The virtualenv is .venv-docs (the `docs` extra; PQJOBS_PYTHON chooses its Python as in
# scripts/_venv.sh), so the test virtualenvs never carry the site's packages.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PQJOBS_VENV=.venv-docs PQJOBS_DJANGO="" source scripts/_venv.sh docs
started=$SECONDS

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

echo "==> mkdocs build --strict"
# NO_MKDOCS_2_WARNING: Material's banner about MkDocs 2 says nothing about this site.
if ! NO_MKDOCS_2_WARNING=1 "$VENV/bin/mkdocs" build --strict --site-dir "$WORK/site" \
    >"$WORK/build.log" 2>&1; then
    grep -v '^INFO' "$WORK/build.log" >&2 || true
    echo "FAILED: mkdocs build --strict (the warnings above)" >&2
    exit 1
fi

echo "==> the README's links, the API reference's completeness"
"$PY" scripts/check_docs_site.py "$WORK/site"
echo "==> the documentation site builds, no broken link ($((SECONDS - started)) s)"
