#!/usr/bin/env bash
# deploy/down.sh [slurm|temporal|mysql|ssh ...] - stop what deploy/up.sh started (no argument:
# all four, in reverse order). Each service's script is deploy/<service>/down.sh; MySQL is only
# stopped when deploy/mysql/up.sh started it.
set -uo pipefail
SERVICE=down
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# a service is any deploy/<name>/ with an up.sh and down.sh (e.g. prometheus)
mapfile -t KNOWN < <(cd "$DEPLOY_DIR" && for d in */; do [ -f "$d/up.sh" ] && echo "${d%/}"; done)
services=("$@")
[ ${#services[@]} -gt 0 ] || services=(ssh mysql temporal slurm)
for s in "${services[@]}"; do
    [[ " ${KNOWN[*]} " == *" $s "* ]] || { echo "usage: $0 [$(IFS="|"; echo "${KNOWN[*]}") ...]  (unknown service '$s')" >&2; exit 2; }
done
need_root
rc=0
for s in "${services[@]}"; do bash "$DEPLOY_DIR/$s/down.sh" || rc=1; done
say "done in $(elapsed)"
exit $rc
