#!/usr/bin/env bash
# deploy/prometheus/up.sh [HOST:PORT ...] - Debian's `prometheus` on 127.0.0.1, scraping the given
# targets (e.g. DCGM exporters) every second, its data in a throw-away directory. Idempotent: when
# it already runs with the same configuration this is a no-op; with other targets it rewrites the
# configuration and reloads (SIGHUP) instead of restarting. Needs no root unless it must install.
#
# Knobs (all optional):
#   JOBMEDIC_PROMETHEUS_PORT      listen port                       (default 9090)
#   JOBMEDIC_PROMETHEUS_DIR       config, data, pid and log files   (default $JOBMEDIC_STACK_DIR/prometheus)
#   JOBMEDIC_PROMETHEUS_TARGETS   targets when no argument is given (comma or space separated;
#                                 default: Prometheus itself)
#   JOBMEDIC_PROMETHEUS_INTERVAL  scrape and evaluation interval    (default 1s)
# Writes $DIR/prometheus.json ({"url", "pid", "config", "log", "data", "targets"}), and
# $JOBMEDIC_STACK_DIR/prometheus.json too when DIR is the default.
set -euo pipefail
SERVICE=prometheus
# shellcheck source=../lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
PORT=${JOBMEDIC_PROMETHEUS_PORT:-9090}
DEFAULT_DIR=$STACK/prometheus
DIR=${JOBMEDIC_PROMETHEUS_DIR:-$DEFAULT_DIR}
INTERVAL=${JOBMEDIC_PROMETHEUS_INTERVAL:-1s}
CONFIG=$DIR/prometheus.yml
DATA=$DIR/data
LOG=$DIR/prometheus.log
PIDFILE=$DIR/prometheus.pid
URL=http://127.0.0.1:$PORT

[[ $PORT =~ ^[0-9]+$ ]] || die "JOBMEDIC_PROMETHEUS_PORT must be a port number, not '$PORT'"
[[ $INTERVAL =~ ^[0-9]+(ms|s|m)$ ]] || die "JOBMEDIC_PROMETHEUS_INTERVAL must look like 1s, 500ms or 1m, not '$INTERVAL'"
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    read -r -a targets <<<"$(printf %s "${JOBMEDIC_PROMETHEUS_TARGETS:-}" | tr , " ")"
fi
[ ${#targets[@]} -gt 0 ] || targets=("127.0.0.1:$PORT")
for t in "${targets[@]}"; do
    # the targets go into YAML: accept host:port only, nothing that could break out of a string
    [[ $t =~ ^[A-Za-z0-9._-]+:[0-9]+$ ]] || die "scrape target '$t' is not HOST:PORT"
done

mkdir -p "$DIR" "$DATA"
exec 9>"$DIR/.lock"
flock -w 120 9 || die "another deploy/prometheus script holds $DIR/.lock"
have prometheus || apt_install prometheus

quoted=$(printf "'%s', " "${targets[@]}")
# prometheus.yml: one job scraping every target; scrape_timeout may not exceed the interval
new_config="# written by deploy/prometheus/up.sh; rewritten on every run
global:
  scrape_interval: $INTERVAL
  scrape_timeout: $INTERVAL
  evaluation_interval: $INTERVAL
scrape_configs:
  - job_name: dcgm
    honor_labels: true
    static_configs:
      - targets: [${quoted%, }]
"
ready() { curl -fsS --max-time 2 "$URL/-/ready" >/dev/null 2>&1; }
wait_ready() {
    for _ in $(seq 150); do ready && return 0; alive "$1" || break; sleep 0.2; done
    die "prometheus (pid $1) is not ready on $URL after 30 s; see $LOG"
}
describe() {
    local targets_json sep='' t
    targets_json='['
    for t in "${targets[@]}"; do targets_json+="$sep$(json_str "$t")"; sep=', '; done
    targets_json+=']'
    local args=(url "$(json_str "$URL")" pid "$1" config "$(json_str "$CONFIG")" log "$(json_str "$LOG")"
        data "$(json_str "$DATA")" targets "$targets_json")
    write_json "$DIR/prometheus.json" "${args[@]}"
    [ "$DIR" != "$DEFAULT_DIR" ] || write_json "$STACK/prometheus.json" "${args[@]}"
}

pid=$(pid_of "$PIDFILE")
if alive "$pid"; then
    if [ "$(cat "$CONFIG" 2>/dev/null)" = "${new_config%$'\n'}" ]; then
        wait_ready "$pid"
        describe "$pid"
        outcome already-up
        say "already up: $URL (pid $pid) scraping ${targets[*]} every $INTERVAL; log $LOG"
        exit 0
    fi
    printf '%s' "$new_config" >"$CONFIG"
    kill -HUP "$pid"
    wait_ready "$pid"
    describe "$pid"
    outcome started
    say "reloaded: $URL (pid $pid) now scrapes ${targets[*]} every $INTERVAL; log $LOG"
    exit 0
fi
port_open "$PORT" && die "something else listens on 127.0.0.1:$PORT; stop it or set JOBMEDIC_PROMETHEUS_PORT"

printf '%s' "$new_config" >"$CONFIG"
printf '\n=== %s deploy/prometheus/up.sh starts prometheus\n' "$(date -Is)" >>"$LOG"
# its own session, so that it outlives the shell or test run that started it
setsid nohup prometheus \
    --config.file="$CONFIG" \
    --storage.tsdb.path="$DATA" \
    --storage.tsdb.retention.time=2d \
    --web.listen-address="127.0.0.1:$PORT" \
    --web.enable-lifecycle \
    >>"$LOG" 2>&1 </dev/null 9>&- &
pid=$!
echo "$pid" >"$PIDFILE"
wait_ready "$pid"
describe "$pid"
outcome started
say "started: $URL (pid $pid) scraping ${targets[*]} every $INTERVAL; config $CONFIG, log $LOG"
