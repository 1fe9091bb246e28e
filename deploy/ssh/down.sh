#!/usr/bin/env bash
# deploy/ssh/down.sh - stop the sshd started by deploy/ssh/up.sh (by its pid file). Keys stay, so
# the next up presents the same host key. Open sessions end on their own.
set -uo pipefail
SERVICE=ssh
# shellcheck source=../lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
lock_service
D=$STACK/ssh
pid=$(pid_of "$D/sshd.pid")
if alive "$pid"; then
    stop_pid "$pid" 5
    say "stopped sshd (pid $pid)"
else
    say "was not running (no live pid in $D/sshd.pid)"
fi
rm -f "$D/sshd.pid" "$STACK/ssh.json"
