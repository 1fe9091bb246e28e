#!/usr/bin/env bash
# deploy/mysql/down.sh - stop MariaDB only if deploy/mysql/up.sh started it (its pid file); a
# server that was there before is left alone. The data directory stays.
set -uo pipefail
SERVICE=mysql
# shellcheck source=../lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
lock_service
PIDFILE=$STACK/mysql/mariadbd.pid
pid=$(pid_of "$PIDFILE")
if alive "$pid"; then
    stop_pid "$pid" 30
    say "stopped MariaDB (pid $pid)"
else
    say "nothing to stop: deploy did not start the server on 127.0.0.1:3306"
fi
rm -f "$PIDFILE" "$STACK/mysql.json"
