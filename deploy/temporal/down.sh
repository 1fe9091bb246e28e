#!/usr/bin/env bash
# deploy/temporal/down.sh - stop the dev server started by deploy/temporal/up.sh (by its pid file;
# a server deploy did not start is left alone). The SQLite history stays for the next start.
set -uo pipefail
SERVICE=temporal
# shellcheck source=../lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
lock_service
PIDFILE=$STACK/temporal/temporal.pid
pid=$(pid_of "$PIDFILE")
if alive "$pid"; then
    stop_pid "$pid" 10
    say "stopped the dev server (pid $pid); history kept in $STACK/temporal/temporal.db"
else
    say "was not running (no live pid in $PIDFILE)"
fi
rm -f "$PIDFILE" "$STACK/temporal.json"
