#!/usr/bin/env bash
# deploy/slurm/up.sh - a real multi-node Slurm cluster on this one host, from the distribution's
# packages: munge auth, one slurmctld, one slurmd per compute node (NodeHostname=localhost, each on
# its own port, started as `slurmd -N nodeN`), no cgroups, no slurmdbd. Idempotent: healthy daemons
# are left alone and only what is missing is (re)started.
#
# Knobs (all optional):
#   JOBMEDIC_SLURM_LAB         config/state/spool/logs   (default /tmp/jobmedic-slurm/cluster)
#   JOBMEDIC_SLURM_NODES       compute nodes node1..N    (default 4)
#   JOBMEDIC_SLURM_CPUS        CPUs per node (may exceed the real count) (default 4)
#   JOBMEDIC_SLURM_CTLD_PORT   slurmctld port            (default 16817)
#   JOBMEDIC_SLURM_BASE_PORT   slurmd of nodeI listens on BASE+I (default 17000)
#   JOBMEDIC_SLURM_GRACE_S     a node killed by node-ctl.sh or drained/downed less than this many
#                              seconds ago is left alone: a test is probably using it (default 120)
#   JOBMEDIC_SLURM_KEEP_STATE=1  keep jobs of an earlier slurmctld run (default: start empty)
#   JOBMEDIC_SLURM_EPILOG_SLURMCTLD  absolute path of an EpilogSlurmctld program (default: none), e.g. a
#                              wrapper that runs `jobmedic notify job-end` (docs/operations.md)
# Writes $JOBMEDIC_STACK_DIR/slurm.json and `export SLURM_CONF=...` into $JOBMEDIC_STACK_DIR/env.sh.
set -euo pipefail
SERVICE=slurm
# shellcheck source=../lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
HERE=$DEPLOY_DIR/slurm
need_root

LAB=${JOBMEDIC_SLURM_LAB:-/tmp/jobmedic-slurm/cluster}
NODES=${JOBMEDIC_SLURM_NODES:-4}
CPUS=${JOBMEDIC_SLURM_CPUS:-4}
CTLD_PORT=${JOBMEDIC_SLURM_CTLD_PORT:-16817}
BASE_PORT=${JOBMEDIC_SLURM_BASE_PORT:-17000}
GRACE=${JOBMEDIC_SLURM_GRACE_S:-120}
EPILOG_SLURMCTLD=${JOBMEDIC_SLURM_EPILOG_SLURMCTLD:-}
[ -z "$EPILOG_SLURMCTLD" ] || [[ $EPILOG_SLURMCTLD == /* ]] || die "JOBMEDIC_SLURM_EPILOG_SLURMCTLD must be an absolute path"
export SLURM_CONF=$LAB/etc/slurm.conf
USABLE='^(idle|alloc|mix|comp)$'
lock_service
started=()

# ------------------------------------------------------------------ packages
missing=()
for c in slurmctld slurmd sbatch munged; do have "$c" || missing=(slurmctld slurmd slurm-client munge); done
have ps || missing+=(procps)
have ss || missing+=(iproute2)
[ ${#missing[@]} -eq 0 ] || apt_install "${missing[@]}"
mkdir -p "$LAB"/{etc,state,spool,log,run}

# ------------------------------------------------------------------ munge
if [ ! -s /etc/munge/munge.key ]; then
    say "creating /etc/munge/munge.key"
    if have mungekey; then mungekey --create --keyfile=/etc/munge/munge.key; else
        dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none; fi
    chown munge:munge /etc/munge/munge.key
    chmod 400 /etc/munge/munge.key
fi
install -d -o munge -g munge -m 755 /run/munge
munge_ok() { munge -n 2>/dev/null | unmunge >/dev/null 2>&1; }
if ! munge_ok; then
    p=$(pid_of /run/munge/munged.pid)
    alive "$p" && die "munged (pid $p) runs but does not answer; see /var/log/munge/munged.log"
    rm -f /run/munge/munged.pid
    runuser -u munge -- /usr/sbin/munged --force 9>&-
    touch "$LAB/run/munged.started-by-jobmedic"
    for _ in $(seq 50); do munge_ok && break; sleep 0.1; done
    munge_ok || die "munged did not start; see /var/log/munge/munged.log"
    started+=("started munged pid $(pid_of /run/munge/munged.pid) (log /var/log/munge/munged.log)")
fi

# ------------------------------------------------------------------ slurm.conf
render_conf() {
    cat <<EOF
# written by jobmedic deploy/slurm/up.sh: a ${NODES}-node lab cluster on one host
ClusterName=lab
SlurmctldHost=$(hostname -s)(127.0.0.1)
SlurmctldPort=${CTLD_PORT}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
# a requeued job may start again only after cred_expire (+1 s); Slurm's default is 120 s
AuthInfo=cred_expire=10
CredType=cred/munge
MailProg=/bin/true
StateSaveLocation=$LAB/state
SlurmdSpoolDir=$LAB/spool/%n
SlurmctldPidFile=$LAB/run/slurmctld.pid
SlurmdPidFile=$LAB/run/slurmd-%n.pid
SlurmctldLogFile=$LAB/log/slurmctld.log
SlurmdLogFile=$LAB/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
# no cgroups and no accounting daemon on a lab host
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
# keep job comments (jobmedic's opt-in lives there) wherever Slurm stores job records
AccountingStoreFlags=job_comment
# without slurmdbd there is no sacct: one line per finished job instead
JobCompType=jobcomp/filetxt
JobCompLoc=$LAB/log/jobcomp.txt
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=1
# a dead node is noticed within seconds; jobs are cleaned up fast
SlurmdTimeout=5
MessageTimeout=5
KillWait=2
InactiveLimit=0
# finished jobs stay visible to squeue/scontrol for 10 minutes
MinJobAge=600
# a node DOWN for not responding returns by itself once its slurmd registers again;
# a node an admin set DOWN stays DOWN until State=RESUME
ReturnToService=1
JobRequeue=1
EOF
    if [ -n "$EPILOG_SLURMCTLD" ]; then
        echo "# slurmctld runs this when a job ends (and when it is requeued), SLURM_JOB_* in its environment"
        echo "EpilogSlurmctld=$EPILOG_SLURMCTLD"
    fi
    cat <<EOF
# CPUs= below may exceed the host's real cores
SlurmdParameters=config_overrides
EOF
    local i
    for i in $(seq 1 "$NODES"); do
        echo "NodeName=node$i NodeHostname=localhost Port=$((BASE_PORT + i)) CPUs=$CPUS RealMemory=1000 State=UNKNOWN"
    done
    echo "PartitionName=debug Nodes=node[1-$NODES] Default=YES MaxTime=INFINITE State=UP"
}

ctld_pid() { pid_of "$LAB/run/slurmctld.pid"; }
ctld_up() { scontrol ping 2>/dev/null | grep -q 'is UP'; }
conf_nodes() { sed -n 's/^NodeName=\([^ ]*\).*/\1/p' "$SLURM_CONF"; }

want=$(mktemp)
trap 'rm -f "$want"' EXIT
render_conf >"$want"
if ! cmp -s "$want" "$SLURM_CONF"; then
    if alive "$(ctld_pid)"; then
        active=$( (squeue -h -t PD,CF,R,CG,S -o %i 2>/dev/null || true) | wc -l)
        if [ "$active" -gt 0 ]; then
            say "the running cluster's slurm.conf differs from deploy's, but it has $active active job(s):" \
                "reusing it as it is (run deploy/down.sh slurm and up again to switch)"
        else
            say "the running cluster's slurm.conf differs from deploy's and no job is active: restarting it"
            _JOBMEDIC_LOCKED=slurm JOBMEDIC_SLURM_KEEP_MUNGE=1 bash "$HERE/down.sh" | sed 's/^/  /'
            install -m 644 "$want" "$SLURM_CONF"
        fi
    else
        install -m 644 "$want" "$SLURM_CONF"
    fi
fi

# ------------------------------------------------------------------ slurmctld
if ! alive "$(ctld_pid)"; then
    if [ "${JOBMEDIC_SLURM_KEEP_STATE:-0}" != 1 ]; then
        rm -rf "${LAB:?}"/state/* "$LAB/log/jobcomp.txt"
    fi
    slurmctld -f "$SLURM_CONF" -i 9>&-
    for _ in $(seq 100); do ctld_up && break; sleep 0.1; done
    ctld_up || die "slurmctld did not come up; last lines of $LAB/log/slurmctld.log:
$(tail -20 "$LAB/log/slurmctld.log" 2>/dev/null)"
    started+=("started slurmctld pid $(ctld_pid) on 127.0.0.1:$CTLD_PORT (log $LAB/log/slurmctld.log)")
fi
ctld_up || die "slurmctld (pid $(ctld_pid)) does not answer 'scontrol ping'; see $LAB/log/slurmctld.log"

# ------------------------------------------------------------------ one slurmd per node
now=$(date +%s)
recently() { [ -n "$1" ] && [ $((now - $1)) -lt "$GRACE" ]; }
mapfile -t nodes < <(conf_nodes)
left_alone=()
for n in "${nodes[@]}"; do
    alive "$(pid_of "$LAB/run/slurmd-$n.pid")" && continue
    killed_at=$(pid_of "$LAB/run/$n.killed-at")
    if recently "$killed_at"; then
        left_alone+=("$n (slurmd killed by node-ctl.sh $((now - killed_at)) s ago)")
        continue
    fi
    rm -f "$LAB/run/$n.killed-at"
    mkdir -p "$LAB/spool/$n"
    slurmd -f "$SLURM_CONF" -N "$n" 9>&-
    started+=("started slurmd $n (log $LAB/log/slurmd-$n.log)")
done

# ------------------------------------------------------------------ every node usable
# sinfo line: node|state|reason timestamp; a starred state (idle*) means "not responding yet"
node_lines() { sinfo -h -N -o '%N|%t|%H' | sort -u; }
is_left_alone() { [[ " ${left_alone[*]} " == *" $1 "* ]]; }
unusable() { # reads node lines, prints the nodes that should be usable but are not
    while IFS='|' read -r n st _; do [[ $st =~ $USABLE ]] || is_left_alone "$n" || echo "$n"; done
}
# A node DOWN/DRAIN by an admin (state without '*') needs State=RESUME; a starred one (not
# responding) comes back by itself once its slurmd registers (ReturnToService=1).
resumed=" "
lines=$(node_lines)
for _ in $(seq 300); do
    [ -z "$(unusable <<<"$lines")" ] && break
    while IFS='|' read -r n st when; do
        [[ $st =~ $USABLE ]] || is_left_alone "$n" || [[ $resumed == *" $n "* ]] && continue
        [[ $st =~ ^(down|drain|drng|fail|failg)$ ]] || continue
        since=$(date -d "$when" +%s 2>/dev/null || true)
        if recently "$since"; then
            left_alone+=("$n ($st since $when: $(sinfo -h -n "$n" -o %E))")
            continue
        fi
        reason=$(sinfo -h -n "$n" -o %E)
        scontrol update NodeName="$n" State=RESUME 2>/dev/null || true
        resumed+="$n "
        started+=("resumed $n (was $st: $reason)")
    done <<<"$lines"
    sleep 0.1
    lines=$(node_lines)
done
bad=$(unusable <<<"$lines" | tr '\n' ' ')
[ -z "$bad" ] || die "nodes not usable after 30 s: $bad(sinfo: $(sinfo -h -N -o '%N=%t' | tr '\n' ' ')); see $LAB/log/"

# ------------------------------------------------------------------ describe
nodes_json=$(printf '"%s",' "${nodes[@]}")
write_json "$STACK/slurm.json" \
    slurm_conf "$(json_str "$SLURM_CONF")" \
    nodes "[${nodes_json%,}]" \
    lab_dir "$(json_str "$LAB")" \
    node_ctl "$(json_str "$HERE/node-ctl.sh")"
set_env SLURM_CONF "$SLURM_CONF"

summary="$(cut -d'|' -f2 <<<"$lines" | sort | uniq -c | awk '{printf "%s %s, ", $1, $2}')nodes ${nodes[*]} (slurmctld 127.0.0.1:$CTLD_PORT, SLURM_CONF=$SLURM_CONF, logs $LAB/log/)"
if [ ${#started[@]} -eq 0 ]; then
    outcome already-up
    say "already up: $summary"
else
    outcome started
    for s in "${started[@]}"; do say "$s"; done
    say "up: $summary"
fi
for s in "${left_alone[@]}"; do say "left alone: $s"; done
