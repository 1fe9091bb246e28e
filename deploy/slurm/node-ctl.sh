#!/usr/bin/env bash
# deploy/slurm/node-ctl.sh - make a node of the deploy/slurm cluster die or come back.
#   node-ctl.sh kill  nodeN   SIGKILL nodeN's slurmd and every slurmstepd of that node with its
#                             children: the node is dead, slurmctld marks it DOWN (Not responding)
#                             within ~15-20 s and requeues or fails its jobs.
#   node-ctl.sh start nodeN   start nodeN's slurmd again; with ReturnToService=1 a node that went
#                             DOWN for not responding becomes usable again by itself.
#   node-ctl.sh pids  nodeN   print the slurmd pid and the slurmstepd pids of nodeN
# The cluster is found through JOBMEDIC_SLURM_LAB, else SLURM_CONF (LAB/etc/slurm.conf), else the
# default /tmp/jobmedic-slurm/cluster. `kill` leaves a LAB/run/nodeN.killed-at stamp so that a
# concurrent deploy/up.sh leaves the node dead for a while (JOBMEDIC_SLURM_GRACE_S) instead of
# reviving it under a running test.
set -euo pipefail
if [ -n "${JOBMEDIC_SLURM_LAB:-}" ]; then LAB=$JOBMEDIC_SLURM_LAB
elif [[ ${SLURM_CONF:-} == */etc/slurm.conf && -d ${SLURM_CONF%/etc/slurm.conf}/run ]]; then LAB=${SLURM_CONF%/etc/slurm.conf}
else LAB=/tmp/jobmedic-slurm/cluster; fi
export SLURM_CONF=$LAB/etc/slurm.conf
usage() { echo "usage: $0 kill|start|pids nodeN" >&2; exit 2; }
[ $# -eq 2 ] || usage
cmd=$1 node=$2
[[ $node =~ ^[A-Za-z0-9_-]+$ ]] || usage
grep -q "^NodeName=$node " "$SLURM_CONF" || { echo "$node is not a node of $SLURM_CONF" >&2; exit 2; }

slurmd_pid() { if [ -s "$LAB/run/slurmd-$node.pid" ]; then tr -dc '0-9' <"$LAB/run/slurmd-$node.pid"; fi; }
descendants() { local c; for c in $(ps -o pid= --ppid "$1" 2>/dev/null); do descendants "$c"; echo "$c"; done; }
# each slurmstepd listens on a unix socket in its node's spool dir: that is how a step is
# attributed to a node when all nodes share one host
stepds() { ss -xlpn 2>/dev/null | grep -F "$LAB/spool/$node/" | grep -o 'pid=[0-9]*' | cut -d= -f2 | sort -u || true; }

case $cmd in
pids) echo "slurmd=$(slurmd_pid) stepd=$(stepds | tr '\n' ' ')" ;;
kill)
    victims=$(slurmd_pid)
    for p in $(stepds); do victims="$victims $p $(descendants "$p" | tr '\n' ' ')"; done
    date +%s >"$LAB/run/$node.killed-at"
    # shellcheck disable=SC2086
    [ -n "${victims// /}" ] && kill -KILL $victims 2>/dev/null || true
    rm -f "$LAB/run/slurmd-$node.pid"
    echo "killed $node: ${victims:-nothing was running}"
    ;;
start)
    rm -f "$LAB/run/$node.killed-at"
    p=$(slurmd_pid)
    if [ -n "$p" ] && kill -0 "$p" 2>/dev/null; then echo "$node slurmd already running (pid $p)"; exit 0; fi
    mkdir -p "$LAB/spool/$node"
    slurmd -f "$SLURM_CONF" -N "$node"
    for _ in $(seq 50); do [ -s "$LAB/run/slurmd-$node.pid" ] && break; sleep 0.1; done
    echo "started $node slurmd pid $(slurmd_pid) (log $LAB/log/slurmd-$node.log)"
    ;;
*) usage ;;
esac
