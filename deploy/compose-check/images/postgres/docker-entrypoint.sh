#!/bin/sh
# Stand-in for the postgres image's docker-entrypoint.sh (see the
# Dockerfile beside it for what it does and does not reproduce).
set -eu

# As root: own the data folder, then run again as postgres.
if [ "$(id -u)" = 0 ]; then
  mkdir -p "$PGDATA"
  chown postgres:postgres "$PGDATA"
  chmod 700 "$PGDATA"
  exec setpriv --reuid=postgres --regid=postgres --init-groups "$0" "$@"
fi

if [ "$1" = postgres ] && [ ! -s "$PGDATA/PG_VERSION" ]; then
  user="${POSTGRES_USER:-postgres}"
  db="${POSTGRES_DB:-$user}"
  if [ -z "${POSTGRES_PASSWORD:-}" ]; then
    echo "Database is uninitialized and superuser password is not specified (POSTGRES_PASSWORD)." >&2
    exit 1
  fi
  pwfile="$(mktemp)"
  printf '%s\n' "$POSTGRES_PASSWORD" >"$pwfile"
  initdb --username="$user" --pwfile="$pwfile" --auth-local=trust --auth-host=scram-sha-256 -D "$PGDATA"
  rm -f "$pwfile"
  echo "listen_addresses = '127.0.0.1'" >>"$PGDATA/postgresql.conf"
  # Upstream creates POSTGRES_DB on a server that listens on no TCP port.
  pg_ctl -D "$PGDATA" -o "-c listen_addresses=''" -w start
  if [ "$db" != postgres ]; then
    psql -v ON_ERROR_STOP=1 --username "$user" --dbname postgres -c "CREATE DATABASE \"$db\""
  fi
  pg_ctl -D "$PGDATA" -m fast -w stop
  echo "PostgreSQL init process complete; ready for start up."
fi

exec "$@"
