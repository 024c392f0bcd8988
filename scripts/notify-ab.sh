#!/usr/bin/env bash
# What outbox_event's NOTIFY trigger (migration 00004) costs a charge, in
# one run (docs/benchmarks.md, "CPU per charge beside the peers"): new
# charges at 16 clients with the trigger enabled and disabled, in turn,
# ROUNDS times; CPU per request of the service and of every PostgreSQL
# process by process accounting (/proc/<pid>/stat), WAL fsyncs and bytes
# per request (pg_stat_wal). Reuses what ../shared/bench-peers/run.sh left
# in $SBS (its binaries and the service's cluster, 200,000 orders or more
# seeded); run as root after it, with PG_PORT_BASE and HTTP_PORT_BASE as
# that run had them. Everything it starts it stops, by PID. The trigger is
# enabled again at the end.
#
# The trigger exists only on schemas before migration 00020 (decision
# 0027): run it against a build of a commit before 00020 (0d7cc8b is the
# one measured), whose run.sh cluster was migrated by that build.
set -euo pipefail
SBS=${SBS:-${TMPDIR:-/tmp}/sidebyside}; BIN=$SBS/bin; PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
DIR=$SBS/pg-service; PORT=${PG_PORT_BASE:-25431}; HTTP=${HTTP_PORT_BASE:-28081}; PPORT=$((HTTP + 3))
ROUNDS=${ROUNDS:-3}; ORDER_START=${ORDER_START:-120000}; ORDER_END=${ORDER_END:-200000}
DSN="postgres://postgres@127.0.0.1:$PORT/bench?sslmode=disable"
OUT=$(mktemp -d); chown postgres "$OUT"; echo "logs in $OUT" >&2
runuser -u postgres -- $PGBIN/pg_ctl -D $DIR -l "$OUT/pg.log" -w -t 120 start >/dev/null
PGPID=$(head -1 $DIR/postmaster.pid)
SANDBOX_ADDR=127.0.0.1:$PPORT SANDBOX_LATENCY=0s $BIN/sandbox-provider serve >"$OUT/provider.log" 2>&1 & PROV=$!
env DATABASE_URL="$DSN" HTTP_ADDR=127.0.0.1:$HTTP API_KEYS=bench:secret SANDBOX_PROVIDER_URL=http://127.0.0.1:$PPORT $BIN/payment-service serve >"$OUT/service.log" 2>&1 & SVC=$!
cleanup() { kill $SVC $PROV 2>/dev/null || true; wait $SVC $PROV 2>/dev/null || true; runuser -u postgres -- $PGBIN/pg_ctl -D $DIR -w stop -m fast >/dev/null || true; }
trap cleanup EXIT
for _ in $(seq 1 100); do curl -fsS -o /dev/null http://127.0.0.1:$HTTP/readyz 2>/dev/null && break; sleep 0.2; done
ticks() { local s=0; for p in "$@"; do [[ -r /proc/$p/stat ]] && s=$((s + $(awk '{print $14+$15}' /proc/$p/stat))); done; echo $s; }
pgpids() { echo $PGPID $(pgrep -P $PGPID); }
order=$ORDER_START
printf 'round\ttrigger\treq_s\tp99_ms\trequests\tservice_ms_per_req\tpg_ms_per_req\twal_sync_per_req\twal_bytes_per_req\n'
for round in $(seq 1 "$ROUNDS"); do
  for trig in enabled disabled; do
    if [[ $trig == enabled ]]; then a=ENABLE; else a=DISABLE; fi
    psql "$DSN" -qc "ALTER TABLE outbox_event $a TRIGGER outbox_event_notify"
    psql "$DSN" -qc "SELECT pg_stat_reset_shared('wal')" >/dev/null
    s0=$(ticks $SVC); pids=$(pgpids); p0=$(ticks $pids)
    r=$($BIN/load -url http://127.0.0.1:$HTTP/payments -mode create -c 16 -d 8s -warmup 1s -order-start $order -order-end $ORDER_END | grep RESULT)
    s1=$(ticks $SVC); p1=$(ticks $(pgpids))
    order=$((order + 8000))
    n=$(tr ' ' '\n' <<<"$r" | awk -F= '$1=="sent"{print $2}')
    rps=$(tr ' ' '\n' <<<"$r" | awk -F= '$1=="rps"{print $2}')
    p99=$(tr ' ' '\n' <<<"$r" | awk -F= '$1=="p99_ms"{print $2}')
    sleep 11
    w=$(psql "$DSN" -Atc "SELECT wal_sync||' '||wal_bytes FROM pg_stat_wal")
    printf '%s\t%s\t%s\t%s\t%s\t%.3f\t%.3f\t%.3f\t%.0f\n' $round $trig $rps $p99 $n \
      $(echo "($s1-$s0)*10/$n" | bc -l) $(echo "($p1-$p0)*10/$n" | bc -l) $(echo "${w% *}/$n" | bc -l) $(echo "${w#* }/$n" | bc -l)
  done
done
psql "$DSN" -qc "ALTER TABLE outbox_event ENABLE TRIGGER outbox_event_notify"
