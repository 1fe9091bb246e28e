#!/usr/bin/env bash
# deploy/slurm/down.sh - stop the cluster of deploy/slurm/up.sh. Idempotent.
# Kills only what it can attribute to this cluster: slurmctld and slurmd from their pid files, the
# slurmstepd processes owning sockets in this cluster's spool dirs (with their children), and munged
# only if a lab script started it. Jobs are cancelled first so that slurmd cleans up its own steps.
#   JOBMEDIC_SLURM_LAB        (default /tmp/jobmedic-slurm/cluster)
#   JOBMEDIC_SLURM_PURGE=1    also delete the lab dir afterwards
set -uo pipefail
SERVICE=slurm
# shellcheck source=../lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
need_root
# deploy/slurm/up.sh calls this while it holds the lock (restart with a new slurm.conf)
[ "${_JOBMEDIC_LOCKED:-}" = slurm ] || lock_service
LAB=${JOBMEDIC_SLURM_LAB:-/tmp/jobmedic-slurm/cluster}
export SLURM_CONF=$LAB/etc/slurm.conf
descendants() { local c; for c in $(ps -o pid= --ppid "$1" 2>/dev/null); do descendants "$c"; echo "$c"; done; }
stepd_pids() { ss -xlpn 2>/dev/null | grep -F "$LAB/spool/" | grep -o 'pid=[0-9]*' | cut -d= -f2 | sort -u; }
wait_gone() {
    local p any
    for _ in $(seq 50); do
        any=0
        for p in "$@"; do alive "$p" && any=1; done
        [ $any = 0 ] && return 0
        sleep 0.2
    done
    return 1
}
stopped=()
if alive "$(pid_of "$LAB/run/slurmctld.pid")" && [ -f "$SLURM_CONF" ]; then
    mapfile -t jobs < <(squeue -h -t all -o %i 2>/dev/null)
    if [ ${#jobs[@]} -gt 0 ]; then
        scancel "${jobs[@]}" 2>/dev/null
        for _ in $(seq 50); do [ -z "$(squeue -h -t R,CG,S -o %i 2>/dev/null)" ] && break; sleep 0.2; done
        stopped+=("cancelled ${#jobs[@]} job(s)")
    fi
fi
for p in $(stepd_pids); do
    # shellcheck disable=SC2046
    kill -KILL "$p" $(descendants "$p") 2>/dev/null
    stopped+=("slurmstepd $p")
done
pids=()
for f in "$LAB"/run/slurmd-*.pid "$LAB/run/slurmctld.pid"; do
    p=$(pid_of "$f")
    if alive "$p"; then
        kill -TERM "$p"
        pids+=("$p")
        stopped+=("$(basename "$f" .pid) (pid $p)")
    fi
done
[ ${#pids[@]} -eq 0 ] || wait_gone "${pids[@]}" || kill -KILL "${pids[@]}" 2>/dev/null
rm -f "$LAB"/run/slurmd-*.pid "$LAB/run/slurmctld.pid" "$LAB"/run/*.killed-at
if [ "${JOBMEDIC_SLURM_KEEP_MUNGE:-0}" != 1 ]; then
    for marker in "$LAB/run/munged.started-by-jobmedic" "$LAB/run/munged.started-by-slurmlab"; do
        [ -f "$marker" ] || continue
        p=$(pid_of /run/munge/munged.pid)
        if alive "$p"; then
            stop_pid "$p" 10
            stopped+=("munged (pid $p)")
        fi
        rm -f "$marker"
    done
fi
rm -f "$STACK/slurm.json"
[ "${JOBMEDIC_SLURM_PURGE:-0}" = 1 ] && rm -rf "${LAB:?}"
if [ ${#stopped[@]} -eq 0 ]; then say "was not running"; else say "stopped: ${stopped[*]}"; fi
exit 0
