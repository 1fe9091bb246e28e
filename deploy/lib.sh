# shellcheck shell=bash
# deploy/lib.sh - helpers shared by the deploy/ scripts. Sourced, never run.
# The caller sets SERVICE (used as the log prefix) before sourcing.

DEPLOY_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$DEPLOY_DIR/.." && pwd)
STACK=${JOBMEDIC_STACK_DIR:-/tmp/jobmedic-stack}
VENV=$REPO_ROOT/.venv
SERVICE=${SERVICE:-deploy}
_T0=$(date +%s%N)

mkdir -p "$STACK/locks"

elapsed() { local ms=$((($(date +%s%N) - _T0) / 1000000)); printf '%d.%03ds' $((ms / 1000)) $((ms % 1000)); }
say() { printf '[%s %s] %s\n' "$SERVICE" "$(elapsed)" "$*"; }
die() { printf '[%s %s] ERROR: %s\n' "$SERVICE" "$(elapsed)" "$*" >&2; exit 1; }
alive() { [ -n "${1:-}" ] && kill -0 "$1" 2>/dev/null; }
pid_of() { if [ -s "$1" ]; then tr -dc '0-9' <"$1"; fi; }
# stop_pid PID SECONDS -> SIGTERM, then SIGKILL if PID still lives after SECONDS; fails when it had to kill
stop_pid() {
    local pid=$1 _
    kill -TERM "$pid" 2>/dev/null
    for _ in $(seq $(($2 * 10))); do alive "$pid" || return 0; sleep 0.1; done
    alive "$pid" || return 0
    kill -KILL "$pid" 2>/dev/null
    return 1
}
have() { command -v "$1" >/dev/null 2>&1; }
# true when something accepts TCP connections on 127.0.0.1:$1 (bash's /dev/tcp: no extra tools)
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

need_root() {
    [ "$(id -u)" = 0 ] || die "the local stack installs packages and starts daemons: run this as root (e.g. sudo $0)"
}

# Holds an exclusive lock on this service until the script exits, so that test sessions started
# at the same time do not race each other bringing the same service up.
# Daemons started while the lock is held must not inherit it: start them with `9>&-`.
lock_service() {
    mkdir -p "$STACK/locks"
    exec 9>"$STACK/locks/$SERVICE.lock"
    flock -w 900 9 || die "another deploy script has held $STACK/locks/$SERVICE.lock for 15 minutes; is it stuck?"
}

# apt-get install that works on a machine whose package lists were never fetched.
apt_install() {
    need_root
    say "installing Debian packages: $*"
    (
        flock -w 900 8 || exit 1
        export DEBIAN_FRONTEND=noninteractive
        local opts=(-y -qq --no-install-recommends -o DPkg::Lock::Timeout=300)
        apt-get install "${opts[@]}" "$@" >"$STACK/apt.log" 2>&1 ||
            { apt-get update -qq >>"$STACK/apt.log" 2>&1 && apt-get install "${opts[@]}" "$@" >>"$STACK/apt.log" 2>&1; }
    ) 8>"$STACK/locks/apt.lock" || die "apt-get install $* failed; see $STACK/apt.log"
}

# json_str VALUE -> VALUE as a JSON string (the values are our own paths and words; escaping
# backslashes, quotes and control characters is all JSON needs)
json_str() {
    local s=$1
    s=${s//\\/\\\\}
    s=${s//\"/\\\"}
    s=${s//$'\n'/\\n}
    s=${s//$'\t'/\\t}
    printf '"%s"' "$s"
}

# write_json FILE 'key' 'raw-json-value' ... -> writes {"key": value, ...} atomically
write_json() {
    local file=$1 sep='' body='{'
    shift
    while [ $# -ge 2 ]; do
        body+="$sep$(json_str "$1"): $2"
        sep=', '
        shift 2
    done
    body+='}'
    printf '%s\n' "$body" >"$file.tmp.$$"
    mv -f "$file.tmp.$$" "$file"
}

# set_env NAME VALUE -> (re)places `export NAME=VALUE` in $STACK/env.sh
set_env() {
    (
        flock -w 60 7 || exit 1
        local env=$STACK/env.sh tmp
        tmp=$(mktemp "$STACK/.env.XXXXXX")
        if [ -f "$env" ]; then grep -v "^export $1=" "$env" >"$tmp" || true; fi
        printf 'export %s=%q\n' "$1" "$2" >>"$tmp"
        chmod 644 "$tmp"
        mv -f "$tmp" "$env"
    ) 7>"$STACK/locks/env.lock"
}

# outcome started|already-up: read by deploy/up.sh to say whether anything had to be started
outcome() { echo "$1" >"$STACK/.$SERVICE.outcome"; }

# The project's virtual environment (deploy/bootstrap.sh is a fast no-op when it is current).
ensure_venv() {
    bash "$DEPLOY_DIR/bootstrap.sh" --quiet || die "deploy/bootstrap.sh failed"
}
