#!/usr/bin/env bash
# deploy/up.sh [slurm|temporal|mysql|ssh ...] - bring up jobmedic's local stack (no argument: all
# four). Idempotent: a service that is already up is left alone, and a second run is a fast no-op
# that says so. Each service's script is deploy/<service>/up.sh; what it started is described in
# ${JOBMEDIC_STACK_DIR:-/tmp/jobmedic-stack}/<service>.json, and `source $STACK/env.sh` exports
# SLURM_CONF and the Temporal address for a shell.
set -euo pipefail
SERVICE=up
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ALL=(slurm temporal mysql ssh)
# a service is any deploy/<name>/ with an up.sh and down.sh (e.g. prometheus); no argument means ALL
mapfile -t KNOWN < <(cd "$DEPLOY_DIR" && for d in */; do [ -f "$d/up.sh" ] && echo "${d%/}"; done)
services=("$@")
[ ${#services[@]} -gt 0 ] || services=("${ALL[@]}")
for s in "${services[@]}"; do
    [[ " ${KNOWN[*]} " == *" $s "* ]] || { echo "usage: $0 [$(IFS="|"; echo "${KNOWN[*]}") ...]  (unknown service '$s')" >&2; exit 2; }
done
need_root
fresh=()
for s in "${services[@]}"; do
    rm -f "$STACK/.$s.outcome"
    bash "$DEPLOY_DIR/$s/up.sh" || die "$s did not come up (see the lines above); fix the cause and run $0 $s again"
    [ "$(cat "$STACK/.$s.outcome" 2>/dev/null)" = already-up ] || fresh+=("$s")
done
if [ ${#fresh[@]} -eq 0 ]; then
    say "everything already up (${services[*]}) in $(elapsed); for a shell: source $STACK/env.sh"
else
    say "up in $(elapsed): ${services[*]} (started now: ${fresh[*]}); for a shell: source $STACK/env.sh"
fi
