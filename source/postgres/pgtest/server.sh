#!/usr/bin/env bash
# Start and stop a throwaway PostgreSQL server with wal_level=logical on a free loopback
# port, for the tests and examples of source/postgres. It uses Debian's postgresql
# package (/usr/lib/postgresql/*/bin) and installs it with apt-get when it is absent and
# this script runs as root (as CI does on a fresh machine). PostgreSQL refuses to run as
# root: as root, the server runs as the package's postgres user.
#
#   server.sh install             install Debian's postgresql package if it is absent
#   server.sh start               install if needed, create a cluster in a temporary
#                                 directory, start it, print `export NAME=value` lines
#   server.sh restart [MODE]      pg_ctl restart -m MODE (immediate by default: a crash
#                                 and WAL replay) of the server at PGTEST_DIR
#   server.sh standby             pg_basebackup the server at PGTEST_DIR into a new
#                                 temporary directory and start it as its streaming
#                                 standby on another free port; prints as start does
#   server.sh promote             pg_ctl promote the standby at PGTEST_DIR (it leaves
#                                 recovery on a new timeline and accepts writes)
#   server.sh backup              pg_basebackup (-X stream) the running server at
#                                 PGTEST_DIR into a new directory inside it; prints
#                                 PGTEST_BACKUP, that directory
#   server.sh copy                stop the server at PGTEST_DIR (-m fast), copy its data
#                                 directory into a new directory inside it (a cold
#                                 backup: a disk snapshot), start it again; prints
#                                 PGTEST_BACKUP, that directory
#   server.sh restore BACKUP      stop the server at PGTEST_DIR (-m immediate) if it runs,
#                                 replace its data with the backup BACKUP and start it on
#                                 the same port: a base backup replays its WAL up to the
#                                 backup's consistent point and promotes (a new timeline);
#                                 a copy starts as it was, on the same timeline
#   server.sh restore BACKUP pause
#                                 the same for a base backup, but recovery pauses at the
#                                 consistent point (read-only, the old timeline)
#   server.sh resume              end the paused recovery: the server promotes
#   server.sh stop                stop the server at PGTEST_DIR and remove its directory
#                                 (nothing to do if it is gone)
#
# start and standby print:
#   PGTEST_DIR   the cluster's directory (data, log); pass it back to restart and stop
#   PGTEST_PORT  the server's port on 127.0.0.1
#   PGTEST_URL   postgres://postgres@127.0.0.1:PORT/postgres?sslmode=disable
#
# Environment: PGTEST_PARENT_PID (start, standby: stop the server once that process
# exits, so a killed test binary leaves nothing behind); PGTEST_WAL_LEVEL (start:
# wal_level, logical by default).
set -euo pipefail

bindir() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1; }

install() {
  [ -n "$(bindir)" ] && [ -x "$(bindir)/postgres" ] && return 0
  if [ "$(id -u)" != 0 ]; then
    echo "server.sh: PostgreSQL is not installed in /usr/lib/postgresql and this is not root: run apt-get install postgresql as root" >&2
    return 1
  fi
  echo "server.sh: installing Debian's postgresql package" >&2
  apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql >&2
  [ -x "$(bindir)/postgres" ] || { echo "server.sh: postgresql installed but no /usr/lib/postgresql/*/bin/postgres" >&2; return 1; }
}

as_owner() { # run a command as the cluster's owner: postgres when root, else this user
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

free_port() { # a loopback port nobody listens on, below the ephemeral range
  local p
  for _ in $(seq 1 100); do
    p=$((10000 + RANDOM % 22000))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then echo "$p"; return 0; fi
  done
  echo "server.sh: no free port" >&2; return 1
}

need_dir() {
  DIR=${PGTEST_DIR:-}
  [ -n "$DIR" ] && [ -d "$DIR/data" ] || { echo "server.sh: PGTEST_DIR is not set to a cluster directory" >&2; exit 2; }
}

pgctl_start() {
  as_owner "$B/pg_ctl" -D "$DIR/data" -l "$DIR/log" -w -t 60 start >/dev/null ||
    { echo "server.sh: the server did not start:" >&2; tail -20 "$DIR/log" >&2; return 1; }
}

new_dir() { # a new cluster directory in DIR, removed (its server stopped) should this script fail
  DIR=$(mktemp -d "${TMPDIR:-/tmp}/pgtest.XXXXXX")
  chmod 755 "$DIR"
  [ "$(id -u)" = 0 ] && chown postgres "$DIR"
  trap 'as_owner "$B/pg_ctl" -D "$DIR/data" -m immediate -w stop >/dev/null 2>&1 || true; rm -rf "$DIR"' EXIT
}

started() { # keep the server at DIR, start its watchdog, print where it is
  trap - EXIT
  if [ -n "${PGTEST_PARENT_PID:-}" ]; then
    # Watchdog: stop the server once the parent process is gone.
    ( trap '' HUP
      while kill -0 "$PGTEST_PARENT_PID" 2>/dev/null && [ -d "$DIR" ]; do sleep 1; done
      [ -d "$DIR" ] && PGTEST_DIR=$DIR "$0" stop ) </dev/null >/dev/null 2>&1 &
  fi
  echo "export PGTEST_DIR=$DIR PGTEST_PORT=$PORT PGTEST_URL=postgres://postgres@127.0.0.1:$PORT/postgres?sslmode=disable"
}

start() {
  install
  B=$(bindir)
  new_dir
  as_owner "$B/initdb" -D "$DIR/data" -A trust -U postgres -E UTF8 --no-sync >"$DIR/initdb.log" 2>&1 ||
    { cat "$DIR/initdb.log" >&2; return 1; }
  PORT=$(free_port)
  cat >>"$DIR/data/postgresql.conf" <<CONF
port = $PORT
listen_addresses = '127.0.0.1'
unix_socket_directories = '$DIR'
wal_level = ${PGTEST_WAL_LEVEL:-logical}
max_replication_slots = 40
max_wal_senders = 40
max_connections = 100
fsync = off
synchronous_commit = off
full_page_writes = off
CONF
  pgctl_start
  started
}

standby() {
  need_dir
  B=$(bindir)
  local primary_port
  primary_port=$(sed -n 's/^port = //p' "$DIR/data/postgresql.conf" | tail -1)
  new_dir
  # -R writes standby.signal and primary_conninfo; -X stream copies the WAL written meanwhile.
  as_owner "$B/pg_basebackup" -D "$DIR/data" -R -X stream -c fast -h 127.0.0.1 -p "$primary_port" -U postgres \
    >"$DIR/basebackup.log" 2>&1 || { cat "$DIR/basebackup.log" >&2; return 1; }
  PORT=$(free_port)
  cat >>"$DIR/data/postgresql.conf" <<CONF
port = $PORT
unix_socket_directories = '$DIR'
CONF
  pgctl_start
  started
}

backup() {
  need_dir
  B=$(bindir)
  local port bdir
  port=$(sed -n 's/^port = //p' "$DIR/data/postgresql.conf" | tail -1)
  bdir=$(as_owner mktemp -d "$DIR/backup.XXXXXX")
  # -X stream copies the WAL written during the backup: the backup restores on its own.
  as_owner "$B/pg_basebackup" -D "$bdir/data" -X stream -c fast -h 127.0.0.1 -p "$port" -U postgres \
    >"$bdir/basebackup.log" 2>&1 || { cat "$bdir/basebackup.log" >&2; return 1; }
  echo "export PGTEST_BACKUP=$bdir"
}

copy() {
  need_dir
  B=$(bindir)
  local bdir
  bdir=$(as_owner mktemp -d "$DIR/copy.XXXXXX")
  as_owner "$B/pg_ctl" -D "$DIR/data" -m fast -w -t 60 stop >/dev/null
  as_owner cp -a "$DIR/data" "$bdir/data"
  pgctl_start
  echo "export PGTEST_BACKUP=$bdir"
}

restore() {
  need_dir
  B=$(bindir)
  local bdir=${1:-} action=promote
  [ "${2:-}" = pause ] && action=pause
  [ -n "$bdir" ] && [ -d "$bdir/data" ] || { echo "server.sh: restore needs a backup directory from server.sh backup" >&2; exit 2; }
  as_owner "$B/pg_ctl" -D "$DIR/data" -m immediate -w stop >/dev/null 2>&1 || true
  rm -rf "$DIR/data"
  as_owner cp -a "$bdir/data" "$DIR/data"
  [ -f "$DIR/data/backup_label" ] || { pgctl_start; return; } # a copy: as it was
  # A point-in-time restore: recover from the backup's WAL alone (restore_command finds
  # nothing more) up to the backup's consistent point, then promote onto a new timeline,
  # or (pause) stay there in recovery, read-only, until resume.
  as_owner touch "$DIR/data/recovery.signal"
  cat >>"$DIR/data/postgresql.conf" <<CONF
restore_command = 'false'
recovery_target = 'immediate'
recovery_target_action = '$action'
CONF
  pgctl_start
  # pg_ctl returns once the server accepts connections; wait until it has promoted, or
  # paused at the target.
  if [ "$action" = pause ]; then
    wait_sql "SELECT pg_get_wal_replay_pause_state()" paused
  else
    wait_sql "SELECT pg_is_in_recovery()" f
  fi
}

resume() {
  need_dir
  B=$(bindir)
  psql_owner -c 'SELECT pg_wal_replay_resume()' >/dev/null
  wait_sql "SELECT pg_is_in_recovery()" f
}

psql_owner() { # psql as the owner, on the server at DIR
  as_owner "$B/psql" -h 127.0.0.1 -p "$(sed -n 's/^port = //p' "$DIR/data/postgresql.conf" | tail -1)" -U postgres -d postgres -At "$@"
}

wait_sql() { # polls the query $1 until it answers $2, for up to a minute
  local i
  for i in $(seq 1 600); do
    [ "$(psql_owner -c "$1" 2>/dev/null)" = "$2" ] && return 0
    sleep 0.1
  done
  echo "server.sh: $1 did not answer $2 within a minute:" >&2; tail -20 "$DIR/log" >&2; return 1
}

promote() {
  need_dir
  B=$(bindir)
  as_owner "$B/pg_ctl" -D "$DIR/data" -w -t 60 promote >/dev/null
}

restart() {
  need_dir
  B=$(bindir)
  as_owner "$B/pg_ctl" -D "$DIR/data" -m "${1:-immediate}" -w stop >/dev/null
  pgctl_start
}

stop() {
  [ -n "${PGTEST_DIR:-}" ] && [ ! -e "$PGTEST_DIR" ] && return 0
  need_dir
  B=$(bindir)
  as_owner "$B/pg_ctl" -D "$DIR/data" -m fast -w -t 30 stop >/dev/null 2>&1 ||
    as_owner "$B/pg_ctl" -D "$DIR/data" -m immediate -w stop >/dev/null 2>&1 || true
  rm -rf "$DIR"
}

case "${1:-start}" in
  install) install ;;
  start) start ;;
  restart) restart "${2:-immediate}" ;;
  standby) standby ;;
  promote) promote ;;
  backup) backup ;;
  copy) copy ;;
  restore) restore "${2:-}" "${3:-}" ;;
  resume) resume ;;
  stop) stop ;;
  *) echo "usage: $0 install|start|restart [MODE]|standby|promote|backup|copy|restore BACKUP [pause]|resume|stop" >&2; exit 2 ;;
esac
