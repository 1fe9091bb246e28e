#!/usr/bin/env bash
# deploy/systemd/verify.sh [UNIT ...] - `systemd-analyze verify` and `systemd-analyze security` on
# jobmedic's units (default: every *.service beside this script). Installs Debian's `systemd`
# package when systemd-analyze is missing (no running systemd is needed). The units' ExecStart
# binaries live under /opt/jobmedic/bin on a real install; here each unit is checked as a copy
# whose /opt/jobmedic/bin/ points at executable stubs, everything else unchanged.
# Knob: JOBMEDIC_SYSTEMD_MAX_EXPOSURE (default 2.0): fail when `security` rates a unit above it.
set -euo pipefail
SERVICE=systemd
# shellcheck source=../lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
HERE=$DEPLOY_DIR/systemd
MAX=${JOBMEDIC_SYSTEMD_MAX_EXPOSURE:-2.0}
units=("$@")
[ ${#units[@]} -gt 0 ] || units=("$HERE"/*.service)
have systemd-analyze || apt_install systemd
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/bin" "$work/units"
for tool in jobmedic temporal; do printf '#!/bin/sh\nexit 0\n' >"$work/bin/$tool"; chmod 755 "$work/bin/$tool"; done
copies=()
for unit in "${units[@]}"; do
    copy=$work/units/$(basename "$unit")
    sed "s#/opt/jobmedic/bin/#$work/bin/#g" "$unit" >"$copy"
    copies+=("$copy")
done
# verify prints a line for anything it does not like (unknown keys too) without always failing: both count
out=$(systemd-analyze verify "${copies[@]}" 2>&1) || { echo "$out" >&2; die "systemd-analyze verify failed"; }
[ -z "$out" ] || { echo "$out" >&2; die "systemd-analyze verify complained"; }
for copy in "${copies[@]}"; do
    level=$(systemd-analyze security --offline=true --no-pager "$copy" 2>&1 | sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\).*/\1/p')
    [ -n "$level" ] || die "systemd-analyze security printed no exposure level for $(basename "$copy")"
    awk -v l="$level" -v m="$MAX" 'BEGIN { exit !(l <= m) }' ||
        die "$(basename "$copy"): exposure $level is above $MAX (systemd-analyze security --offline=true shows why)"
    say "$(basename "$copy"): verify ok, exposure $level"
done
