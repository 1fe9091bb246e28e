#!/usr/bin/env bash
# deploy/bootstrap.sh [--quiet] - the project's virtual environment: .venv in the repository root
# with python3 >= 3.11 and `pip install -e '.[dev]'`. Installs python3 and python3-venv through
# apt-get when missing (root). A fast no-op when .venv was built from the current pyproject.toml
# (its hash is kept in .venv/.jobmedic-bootstrap). Knob: JOBMEDIC_PYTHON (interpreter to use).
set -euo pipefail
SERVICE=bootstrap
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
quiet=0
[ "${1:-}" = --quiet ] && quiet=1
STAMP=$VENV/.jobmedic-bootstrap
PIP_LOG=$STACK/pip.log

# hash of what the environment is built from; the python version is part of it
want_stamp() { echo "$(sha256sum "$REPO_ROOT/pyproject.toml" | cut -d' ' -f1) $("$VENV/bin/python" -V 2>&1)"; }
current() { [ -x "$VENV/bin/python" ] && [ "$(cat "$STAMP" 2>/dev/null)" = "$(want_stamp)" ]; }
if current; then
    [ $quiet = 1 ] || say "already bootstrapped: $VENV ($("$VENV/bin/python" -V)) matches pyproject.toml"
    exit 0
fi
exec 8>"$STACK/locks/bootstrap.lock"
flock -w 900 8 || die "another bootstrap has held $STACK/locks/bootstrap.lock for 15 minutes"
current && exit 0 # built by whoever held the lock

new_enough() { "$1" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; }
find_python() {
    local c
    for c in ${JOBMEDIC_PYTHON:-} python3 python3.13 python3.12 python3.11; do
        have "$c" && new_enough "$c" && { command -v "$c"; return 0; }
    done
    return 1
}
py=$(find_python || true)
if [ -z "$py" ]; then
    apt_install python3 python3-venv
    py=$(find_python || true)
    if [ -z "$py" ]; then # e.g. Ubuntu 22.04: its python3 is 3.10, 3.11 is a separate package
        apt_install python3.11 python3.11-venv
        py=$(find_python || true)
    fi
    [ -n "$py" ] || die "no python >= 3.11 found or installable; install one and set JOBMEDIC_PYTHON to it"
fi
# Debian's python3 creates venvs only with python3-venv (ensurepip) installed
venv_ok() { "$py" -c 'import ensurepip, venv' 2>/dev/null; }
if [ ! -x "$VENV/bin/python" ] && ! venv_ok; then
    ver=$("$py" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
    apt_install "python$ver-venv" || apt_install python3-venv
fi

t0=$(date +%s)
if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c 'import sys' 2>/dev/null; then
    say "creating $VENV with $py ($("$py" -V))"
    "$py" -m venv "$VENV" || die "could not create $VENV with $py"
fi
new_enough "$VENV/bin/python" || die "$VENV has $("$VENV/bin/python" -V); remove it and run $0 again"
say "pip install -e '.[dev]' into $VENV (log $PIP_LOG)"
(cd "$REPO_ROOT" && "$VENV/bin/python" -m pip install --disable-pip-version-check -e '.[dev]') >"$PIP_LOG" 2>&1 ||
    die "pip install failed; last lines of $PIP_LOG:
$(tail -20 "$PIP_LOG")"
want_stamp >"$STAMP"
say "bootstrapped $VENV ($("$VENV/bin/python" -V)) in $(($(date +%s) - t0)) s; jobmedic is $VENV/bin/jobmedic"
