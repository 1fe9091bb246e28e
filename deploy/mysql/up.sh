#!/usr/bin/env bash
# deploy/mysql/up.sh - a MySQL-compatible server on 127.0.0.1:3306 with database `test`, where root
# logs in over TCP with an empty password (test and lab use only). If something already answers on
# the port it is used as it is; otherwise MariaDB is installed if missing and started here (and only
# then does deploy/mysql/down.sh stop it). Writes $JOBMEDIC_STACK_DIR/mysql.json.
# Knobs (for a second, private server; the defaults are the system's): JOBMEDIC_MYSQL_PORT (3306),
# JOBMEDIC_MYSQL_DATADIR (/var/lib/mysql), JOBMEDIC_MYSQL_SOCKET (/run/mysqld/mysqld.sock).
set -euo pipefail
SERVICE=mysql
# shellcheck source=../lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
PORT=${JOBMEDIC_MYSQL_PORT:-3306}
DATABASE="test"
URL="mysql+pymysql://root@127.0.0.1:$PORT/$DATABASE"
DIR=$STACK/mysql
LOG=$DIR/mariadb.log
PIDFILE=$DIR/mariadbd.pid
DATADIR=${JOBMEDIC_MYSQL_DATADIR:-/var/lib/mysql}
SOCKET=${JOBMEDIC_MYSQL_SOCKET:-/run/mysqld/mysqld.sock}
mkdir -p "$DIR"
lock_service

# `tcp_sql STATEMENT` as root with an empty password over TCP, the way the tests connect
tcp_sql() {
    if have mariadb; then mariadb --protocol=tcp -h 127.0.0.1 -P "$PORT" -u root -N -B -e "$1"
    else
        ensure_venv
        "$VENV/bin/python" - "$PORT" "$1" <<'PY'
import sys, pymysql
conn = pymysql.connect(host="127.0.0.1", port=int(sys.argv[1]), user="root", password="", autocommit=True)
with conn.cursor() as cur:
    cur.execute(sys.argv[2])
PY
    fi
}
# `socket_sql STATEMENT` as root through the unix socket (root's default login after install)
socket_sql() { mariadb --socket="$SOCKET" -u root -N -B -e "$1"; }

started=""
if port_open "$PORT"; then
    pid=$(pid_of "$PIDFILE")
    if alive "$pid"; then owner="started by deploy, pid $pid, log $LOG"; else owner="not started by deploy"; fi
else
    need_root
    [ -x /usr/sbin/mariadbd ] || apt_install mariadb-server
    install -d -o mysql -g mysql -m 755 /run/mysqld "$(dirname "$SOCKET")"
    if [ ! -d "$DATADIR/mysql" ]; then
        say "initialising the data directory $DATADIR"
        mariadb-install-db --user=mysql --datadir="$DATADIR" --skip-test-db >>"$LOG" 2>&1 ||
            die "mariadb-install-db failed; see $LOG"
    fi
    start-stop-daemon --start --oknodo --background --make-pidfile --pidfile "$PIDFILE" \
        --exec /usr/sbin/mariadbd -- --user=mysql --datadir="$DATADIR" --bind-address=127.0.0.1 \
        --port="$PORT" --socket="$SOCKET" --log-error="$LOG" 9>&-
    for _ in $(seq 300); do port_open "$PORT" && break; sleep 0.2; done
    port_open "$PORT" || die "MariaDB does not answer on 127.0.0.1:$PORT after 60 s; see $LOG"
    owner="started by deploy, pid $(pid_of "$PIDFILE"), log $LOG"
    started="MariaDB on 127.0.0.1:$PORT (pid $(pid_of "$PIDFILE"), datadir $DATADIR, log $LOG)"
fi

# root over TCP without a password, and the database
if ! tcp_sql "CREATE DATABASE IF NOT EXISTS \`$DATABASE\`" 2>/dev/null; then
    have mariadb && socket_sql "SELECT 1" >/dev/null 2>&1 ||
        die "root cannot log in to 127.0.0.1:$PORT with an empty password, and not through the socket" \
            "either; give root an empty password on this (test) server or stop it so that deploy starts its own"
    # a fresh MariaDB lets root in only through the unix socket: add an empty-password login
    socket_sql "ALTER USER 'root'@'localhost' IDENTIFIED VIA mysql_native_password USING PASSWORD('') OR unix_socket;
        CREATE USER IF NOT EXISTS 'root'@'127.0.0.1' IDENTIFIED BY '';
        GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION;
        CREATE DATABASE IF NOT EXISTS \`$DATABASE\`;
        FLUSH PRIVILEGES;" || die "could not give root an empty-password TCP login; see $LOG"
    tcp_sql "SELECT 1" >/dev/null || die "root still cannot log in over TCP; see $LOG"
    started+="${started:+; }root may log in over TCP without a password; database $DATABASE"
fi

write_json "$STACK/mysql.json" url "$(json_str "$URL")"
set_env JOBMEDIC_TEST_MYSQL_URL "$URL"
if [ -z "$started" ]; then
    outcome already-up
    say "already up: 127.0.0.1:$PORT ($owner), $URL"
else
    outcome started
    say "started $started"
    say "up: $URL"
fi
