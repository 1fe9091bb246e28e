#!/usr/bin/env bash
# deploy/ssh/up.sh - a key-only sshd on 127.0.0.1 for jobmedic's SSH mode: its own sshd_config, host
# key and client key pair under $JOBMEDIC_STACK_DIR/ssh, SFTP for reading job logs, and
# `SetEnv SLURM_CONF=...` so that remote Slurm commands find the local cluster. Also writes a
# second known_hosts that lists a different key for the same [host]:port (the wrong-host-key test).
# Idempotent. Knob: JOBMEDIC_SSH_PORT (default 2222; when the default port is taken by another
# program, e.g. the recipe's ssh-up.sh sshd, the next free one up to 2231 is used and named in
# ssh.json). Writes $JOBMEDIC_STACK_DIR/ssh.json.
set -euo pipefail
SERVICE=ssh
# shellcheck source=../lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
PORT=${JOBMEDIC_SSH_PORT:-2222}
HOST=127.0.0.1
USER_NAME=root
D=$STACK/ssh
SLURM_CONF_PATH=${JOBMEDIC_SLURM_LAB:-/tmp/jobmedic-slurm/cluster}/etc/slurm.conf
mkdir -p "$D"
lock_service
need_root

have ssh-keygen && have ssh && [ -x /usr/sbin/sshd ] || apt_install openssh-server openssh-client
install -d -m 755 /run/sshd # privilege separation directory; sshd refuses to start without it

keygen() { [ -s "$1" ] || ssh-keygen -q -t ed25519 -N '' -C "$2" -f "$1"; }
keygen "$D/hostkey" jobmedic-stack-host
keygen "$D/client_key" jobmedic-stack-client
keygen "$D/wrong_hostkey" jobmedic-stack-not-the-host
install -m 600 "$D/client_key.pub" "$D/authorized_keys"

render_config() {
    cat <<CONF
# written by jobmedic deploy/ssh/up.sh
Port $PORT
ListenAddress $HOST
HostKey $D/hostkey
PidFile $D/sshd.pid
AuthorizedKeysFile $D/authorized_keys
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
UsePAM no
# the keys live under /tmp (world-writable parent): skip sshd's ownership/mode checks
StrictModes no
# jobmedic reads job logs over SFTP on the same connection
Subsystem sftp internal-sftp
# remote Slurm commands find the local cluster
SetEnv SLURM_CONF=$SLURM_CONF_PATH
LogLevel VERBOSE
CONF
}
try_login() { # key file, known_hosts file
    ssh -p "$PORT" -i "$1" -o BatchMode=yes -o StrictHostKeyChecking=yes -o UserKnownHostsFile="$2" \
        -o ConnectTimeout=5 -o LogLevel=ERROR "$USER_NAME@$HOST" 'echo "$SLURM_CONF"' 2>/dev/null
}
listener_pid() { ss -ltnpH "sport = :$1" 2>/dev/null | grep -o 'pid=[0-9]*' | head -1 | cut -d= -f2; }

key_file=$D/client_key
known_hosts=$D/known_hosts
log=$D/sshd.log
started=""
pid=$(pid_of "$D/sshd.pid")
if alive "$pid" && [ -f "$D/sshd_config" ]; then
    # stay on the port deploy's sshd already serves, unless JOBMEDIC_SSH_PORT asks for another
    running_port=$(sed -n 's/^Port //p' "$D/sshd_config")
    [ -n "${JOBMEDIC_SSH_PORT:-}" ] || PORT=$running_port
    if [ "$PORT" != "$running_port" ] && port_open "$PORT"; then
        die "deploy's sshd runs on $HOST:$running_port and $HOST:$PORT (JOBMEDIC_SSH_PORT) is taken by pid" \
            "$(listener_pid "$PORT"); free it or leave JOBMEDIC_SSH_PORT unset"
    fi
elif port_open "$PORT"; then
    taken=$PORT
    other=$(listener_pid "$taken")
    [ -z "${JOBMEDIC_SSH_PORT:-}" ] || die "$HOST:$PORT is taken by pid ${other:-unknown}" \
        "($(ps -o args= -p "${other:-1}" 2>/dev/null)); stop it or choose another JOBMEDIC_SSH_PORT"
    for p in $(seq $((taken + 1)) $((taken + 9))); do port_open "$p" || { PORT=$p; break; }; done
    [ "$PORT" != "$taken" ] || die "$HOST:$taken..$((taken + 9)) are all taken; set JOBMEDIC_SSH_PORT to a free port"
    say "$HOST:$taken is taken by another program (pid ${other:-unknown}: $(ps -o args= -p "${other:-1}" 2>/dev/null));" \
        "deploy's sshd uses $HOST:$PORT instead (ssh.json says so)"
fi
echo "[$HOST]:$PORT $(cut -d' ' -f1,2 "$D/hostkey.pub")" >"$known_hosts"
echo "[$HOST]:$PORT $(cut -d' ' -f1,2 "$D/wrong_hostkey.pub")" >"$D/wrong_known_hosts"
render_config >"$D/sshd_config.new"
/usr/sbin/sshd -t -f "$D/sshd_config.new" || die "sshd rejects the generated $D/sshd_config.new"
if alive "$pid"; then
    if ! cmp -s "$D/sshd_config.new" "$D/sshd_config"; then
        mv -f "$D/sshd_config.new" "$D/sshd_config"
        kill -HUP "$pid" # sshd re-executes itself with the new configuration; open sessions stay
        sleep 0.5
        for _ in $(seq 50); do pid=$(pid_of "$D/sshd.pid"); alive "$pid" && port_open "$PORT" && break; sleep 0.1; done
        started="reloaded sshd (pid $pid) with a changed $D/sshd_config"
    fi
else
    mv -f "$D/sshd_config.new" "$D/sshd_config"
    /usr/sbin/sshd -f "$D/sshd_config" -E "$log" 9>&-
    for _ in $(seq 50); do alive "$(pid_of "$D/sshd.pid")" && break; sleep 0.1; done
    pid=$(pid_of "$D/sshd.pid")
    started="sshd pid $pid on $HOST:$PORT (config $D/sshd_config, log $log)"
fi
rm -f "$D/sshd_config.new"

# A login proves key, host key and SetEnv; the stamp keeps the no-op fast: one verified login per
# sshd pid and set of files (a reload or new keys verify again).
STAMP=$D/verified
want_stamp="$pid $(cat "$key_file.pub" "$known_hosts" 2>/dev/null | cksum) $(cksum <"$D/sshd_config" 2>/dev/null)"
seen=""
if [ -n "$started" ] || [ "$(cat "$STAMP" 2>/dev/null)" != "$want_stamp" ]; then
    for _ in $(seq 50); do seen=$(try_login "$key_file" "$known_hosts") && break; sleep 0.1; done
    [ -n "$seen" ] || die "cannot log in to $USER_NAME@$HOST:$PORT with $key_file and $known_hosts; see $log"
    echo "$want_stamp" >"$STAMP"
    seen=" (remote SLURM_CONF=$seen)"
fi

write_json "$STACK/ssh.json" \
    host "$(json_str "$HOST")" \
    port "$PORT" \
    user "$(json_str "$USER_NAME")" \
    key_file "$(json_str "$key_file")" \
    known_hosts "$(json_str "$known_hosts")" \
    wrong_known_hosts "$(json_str "$D/wrong_known_hosts")"
summary="ssh -p $PORT -i $key_file -o UserKnownHostsFile=$known_hosts $USER_NAME@$HOST$seen, pid $pid, log $log"
if [ -z "$started" ]; then
    outcome already-up
    say "already up: $summary"
else
    outcome started
    say "started $started"
    say "up: $summary"
fi
