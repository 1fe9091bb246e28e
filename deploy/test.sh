#!/usr/bin/env bash
# deploy/test.sh [pytest arguments] - from a fresh clone, any working directory: build the virtual
# environment (deploy/bootstrap.sh), bring the local stack up (deploy/up.sh) and run the whole test
# suite with .venv/bin/pytest (with no arguments: ruff and mypy first), then print how long each part took.
# Exits with pytest's status.
set -euo pipefail
DEPLOY=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(dirname "$DEPLOY")
now() { date +%s%N; }
secs() { local ms=$((($2 - $1) / 1000000)); printf '%d.%01ds' $((ms / 1000)) $((ms % 1000 / 100)); }
t0=$(now)
bash "$DEPLOY/bootstrap.sh"
t1=$(now)
bash "$DEPLOY/up.sh"
t2=$(now)
cd "$REPO"
rc=0
if [ $# -eq 0 ]; then  # the whole run: lint (pyflakes, syntax) and types ([tool.mypy] in pyproject.toml) first
    "$REPO/.venv/bin/ruff" check . || { echo "[test] ruff found problems (above); fix them and rerun"; exit 1; }
    "$REPO/.venv/bin/mypy" || { echo "[test] mypy found type errors (above); fix them and rerun"; exit 1; }
fi
"$REPO/.venv/bin/pytest" "$@" || rc=$?
t3=$(now)
echo "[test] bootstrap $(secs "$t0" "$t1"), stack up $(secs "$t1" "$t2"), pytest $(secs "$t2" "$t3")" \
    "(exit $rc), total $(secs "$t0" "$t3")"
exit $rc
