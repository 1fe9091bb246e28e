#!/usr/bin/env bash
# tests/slurm/data/capture.sh - capture the real Slurm output the parser tests read.
# Run as root against the deploy/ cluster (bash deploy/up.sh slurm first); it submits a small
# zoo of jobs named fx-*, drains node3 with a foreign reason and node2 with a jobmedic one, kills
# node4's slurmd to catch DOWN+NOT_RESPONDING, saves the output here and restores everything.
#   squeue.json             squeue --json        (all job shapes the parsers meet)
#   sinfo.json              sinfo --json         (IDLE, DRAIN foreign, DRAIN jobmedic, DOWN+NOT_RESPONDING)
#   scontrol_show_job.txt   scontrol show job J  (multi-line), for several fx-* jobs
#   scontrol_show_job_o.txt scontrol show job -o (one line per job)
#   expected_files.txt      the output files Slurm actually created (for path expansion)
#   ids.txt                 the ids of this capture's fx-* jobs (older fx-* jobs may still be listed)
#   squeue_fields.txt       squeue -o '%i|%T|%l|%r|%h' for those jobs
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
: "${SLURM_CONF:=$(python3 -c 'import json;print(json.load(open("/tmp/jobmedic-stack/slurm.json"))["slurm_conf"])')}"
export SLURM_CONF
NODE_CTL=$ROOT/deploy/slurm/node-ctl.sh
W=$(mktemp -d /tmp/jobmedic-fx.XXXX)
cleanup() {
  # shellcheck disable=SC2046
  scancel $(cat "$W/ids" 2>/dev/null) 2>/dev/null || true
  "$NODE_CTL" start node4 >/dev/null || true
  for n in node2 node3; do scontrol update NodeName=$n State=RESUME 2>/dev/null || true; done
  for n in node4; do scontrol update NodeName=$n State=RESUME 2>/dev/null || true; done
}
trap cleanup EXIT
wait_state() { for _ in $(seq 150); do squeue -h -j "$1" -t all -o %T | grep -Eq "^($2)$" && return 0; sleep 0.2; done; echo "job $1 not $2" >&2; return 1; }
cd "$W"
printf '#!/bin/bash\nsrun -l bash -c "echo rank \\$SLURM_PROCID on \\$SLURMD_NODENAME; sleep 600"\n' >run.sh
printf '#!/bin/bash\necho failing; exit 3\n' >fail.sh
printf '#!/bin/bash\necho done\n' >ok.sh
chmod +x ./*.sh
OPT='{"jobmedic":{"environment":"prod","mode":"observe","max_attempts":4,"checkpoint_dir":"/ckpt/fx"}}'
R=$(sbatch --parsable -N1 -J fx-run --comment="$OPT" -o "$W/%x-%j.out" -e "$W/%x-%j.err" run.sh)
U=$(sbatch --parsable -N2 -n3 -J fx-uneven --comment="$OPT" -o "$W/%x_%5j_%u.log" run.sh)
sbatch --parsable --hold -N1 -J fx-held --comment="$OPT" -o /dev/null run.sh >/dev/null
Q=$(sbatch --parsable -N1 -J fx-rqhold --comment="$OPT" -o /dev/null run.sh)
sbatch --parsable --hold -N1 -J $'fx-evil;$(touch /tmp/fx-marker)`id`"\'\nx|y' --comment=$'{"jobmedic": "x;$(touch /tmp/fx-marker)`id`\'\\"\nnext line|\x1f' -o /dev/null run.sh >/dev/null
sbatch --parsable --hold -N1 -J fx-nvidia --comment='{"nvidia-recovery":{"environment":"staging","mode":"action"}}' -o /dev/null run.sh >/dev/null
sbatch --parsable --hold -N1 -J fx-invalid --comment='{"jobmedic":{"environment":"prod","mode":"yolo"}}' -o /dev/null run.sh >/dev/null
sbatch --parsable --hold -N1 -J fx-plain --comment='just a note, not for jobmedic' -o /dev/null run.sh >/dev/null
F=$(sbatch --parsable -N1 -J fx-fail --comment="$OPT" fail.sh)
C=$(sbatch --parsable -N1 -J fx-cancel --comment="$OPT" -o /dev/null run.sh)
O=$(sbatch --parsable -N1 -J fx-ok --comment="$OPT" -o "$W/ok-%A-%a-%j.out" ok.sh)
A=$(sbatch --parsable -N1 -J fx-arr --array=1-2 --comment="$OPT" -o "$W/arr-%A_%a.out" ok.sh)
mkdir -p "$W/sub"; L=$(cd "$W/sub" && sbatch --parsable -N1 -J fx-relative --comment="$OPT" ../ok.sh)
squeue -h -t all -o '%i %j' | awk -v first="$R" '$2 ~ /^fx-/ && $1 >= first {print $1}' | sort -n >"$W/ids"
wait_state "$R" RUNNING; wait_state "$U" RUNNING; wait_state "$Q" RUNNING; wait_state "$C" RUNNING
wait_state "$F" FAILED; wait_state "$O" COMPLETED; wait_state "$L" COMPLETED
scontrol requeuehold "$Q"; wait_state "$Q" PENDING
scontrol update JobId="$Q" ExcNodeList=node1,node2
scancel "$C"; wait_state "$C" CANCELLED
sleep 1
squeue --json >"$HERE/squeue.json"
# what squeue itself prints for the same jobs, to cross-check the JSON parser
squeue -h -t all -o '%i|%T|%l|%r|%h' | grep -E "^($(paste -sd'|' "$W/ids"))\|" >"$HERE/squeue_fields.txt"
cp "$W/ids" "$HERE/ids.txt"
: >"$HERE/scontrol_show_job.txt"; : >"$HERE/scontrol_show_job_o.txt"
for j in $R $U $Q $F $C $O $L; do
  scontrol show job "$j" >>"$HERE/scontrol_show_job.txt"; scontrol show job -o "$j" >>"$HERE/scontrol_show_job_o.txt"
done
ls "$W" "$W/sub" | grep -E '\.(out|err|log)$' | sort >"$HERE/expected_files.txt"
# nodes: a foreign drain, a jobmedic drain, a dead node
scontrol update NodeName=node3 State=DRAIN Reason="rma: bad DIMM; ticket #42"
scontrol update NodeName=node2 State=DRAIN Reason="jobmedic: xid 79 on job $R"
"$NODE_CTL" kill node4 >/dev/null
for _ in $(seq 120); do sinfo -h -n node4 -o %t | grep -q '^down' && break; sleep 0.5; done
sinfo --json >"$HERE/sinfo.json"
sinfo -h -N -o '%N|%T|%E' >"$HERE/sinfo_N.txt"
echo "captured into $HERE (workdir $W)"
