#!/usr/bin/env bash
# deploy/chromium/install.sh - Debian's headless Chromium, for the console check (a screenshot of a
# recovered job's page in the Temporal UI, tests/console/). Idempotent: a no-op when it is there.
# Prints the browser's path on its last line.
set -euo pipefail
SERVICE=chromium
# shellcheck source=../lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
find_browser() {
    local b
    for b in chromium chromium-browser google-chrome; do
        if have "$b"; then command -v "$b"; return 0; fi
    done
    return 1
}
if ! find_browser >/dev/null; then
    apt_install chromium fonts-dejavu-core
fi
browser=$(find_browser) || die "chromium is not on PATH after installing it; see $STACK/apt.log"
say "browser: $("$browser" --version 2>/dev/null || echo unknown version)"
echo "$browser"
