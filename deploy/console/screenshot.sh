#!/usr/bin/env bash
# deploy/console/screenshot.sh WORKFLOW_ID OUT.png - a screenshot of one recovery workflow's page in
# the Temporal Web UI, taken the way a person sees it: Debian's Chromium, headless, with the page's
# JavaScript run to completion. Installs Chromium when it is missing (deploy/chromium/install.sh).
#
# Knobs (all optional):
#   JOBMEDIC_TEMPORAL__UI_URL     the UI's base URL            (default http://127.0.0.1:8233)
#   JOBMEDIC_TEMPORAL__NAMESPACE  the namespace               (default default)
#   JOBMEDIC_SCREENSHOT_SIZE      window size WIDTHxHEIGHT     (default 1500x1400)
set -euo pipefail
SERVICE=console
# shellcheck source=../lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
[ $# -eq 2 ] || die "usage: $0 WORKFLOW_ID OUT.png"
WID=$1
OUT=$2
UI=${JOBMEDIC_TEMPORAL__UI_URL:-http://127.0.0.1:8233}
NS=${JOBMEDIC_TEMPORAL__NAMESPACE:-default}
SIZE=${JOBMEDIC_SCREENSHOT_SIZE:-1500x1400}
# the id goes into a URL: our workflow ids are [A-Za-z0-9._-]; anything else is refused, not escaped
[[ $WID =~ ^[A-Za-z0-9._-]+$ ]] || die "workflow id '$WID' has characters a jobmedic workflow id never has"
[[ $NS =~ ^[A-Za-z0-9._-]+$ ]] || die "namespace '$NS' is not a Temporal namespace name"
[[ $SIZE =~ ^[0-9]+x[0-9]+$ ]] || die "JOBMEDIC_SCREENSHOT_SIZE must look like 1500x1400, not '$SIZE'"
browser=$("$DEPLOY_DIR/chromium/install.sh" | tail -n 1)
url="${UI%/}/namespaces/$NS/workflows/$WID"
mkdir -p "$(dirname "$OUT")"
profile=$(mktemp -d)
trap 'rm -rf "$profile"' EXIT
# --virtual-time-budget lets the single-page app fetch the workflow and render before the capture
"$browser" --headless --no-sandbox --disable-gpu --hide-scrollbars --user-data-dir="$profile" \
    --window-size="${SIZE/x/,}" --virtual-time-budget=15000 --screenshot="$OUT" "$url" \
    >"$profile/chromium.log" 2>&1 || die "chromium failed on $url: $(tail -n 3 "$profile/chromium.log")"
[ -s "$OUT" ] || die "chromium wrote no screenshot of $url"
say "screenshot of $url: $OUT ($(stat -c %s "$OUT") bytes)"
