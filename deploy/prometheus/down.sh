#!/usr/bin/env bash
# deploy/prometheus/down.sh [--purge] - stop the Prometheus that deploy/prometheus/up.sh started
# (same JOBMEDIC_PROMETHEUS_DIR). Idempotent. --purge also deletes its directory (data, config, log).
set -euo pipefail
SERVICE=prometheus
# shellcheck source=../lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
DEFAULT_DIR=$STACK/prometheus
DIR=${JOBMEDIC_PROMETHEUS_DIR:-$DEFAULT_DIR}
PIDFILE=$DIR/prometheus.pid
purge=no
case "${1:-}" in
    --purge) purge=yes ;;
    "") ;;
    *) die "usage: $0 [--purge]" ;;
esac

pid=$(pid_of "$PIDFILE")
if alive "$pid" && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q "prometheus"; then
    if stop_pid "$pid" 10; then
        say "stopped prometheus (pid $pid)"
    else
        say "prometheus (pid $pid) ignored SIGTERM for 10 s; killed"
    fi
else
    say "prometheus is not running (no live pid in $PIDFILE)"
fi
rm -f "$PIDFILE" "$DIR/prometheus.json"
[ "$DIR" != "$DEFAULT_DIR" ] || rm -f "$STACK/prometheus.json"
if [ "$purge" = yes ]; then
    case "$DIR" in
        /|"") die "refusing to purge '$DIR'" ;;
    esac
    rm -rf -- "$DIR"
    say "removed $DIR"
fi
