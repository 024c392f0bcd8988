#!/usr/bin/env bash
# scripts/pg-ha-local.sh start|stop|status|rejoin|fault KIND
#
# Runs a highly available PostgreSQL on loopback, for the failover suite
# (test/fault, build tag failover) and by hand: one etcd, three PostgreSQL
# 15 members each run by its own Patroni, synchronous_mode on, and HAProxy
# in front, routing to the member whose Patroni answers 200 on /primary and
# shutting every session to a member the moment its check fails. No Docker:
# etcd and HAProxy are Debian's packages, Patroni comes from PyPI into a
# virtual environment, the PostgreSQL binaries are the ones internal/pgtemp
# uses.
#
# Layout (all under the git-ignored .pg-ha/ at the repo root):
#   .pg-ha/venv-<patroni version>/   Patroni's virtual environment
#   .pg-ha/run/                      pids, configurations, logs, data
#
# Environment (all optional):
#   PG_HA_BASE_PORT     the members listen on BASE, BASE+1, BASE+2; their
#                       Patroni REST APIs on BASE+100..102, etcd on
#                       BASE+200 and BASE+201, HAProxy on BASE+300
#                       (default 25432)
#   PG_HA_TTL           Patroni's leader key ttl, seconds (default 20, the
#                       least Patroni 4 accepts)
#   PG_HA_LOOP_WAIT     Patroni's loop_wait, seconds (default 2)
#   PG_HA_START_TIMEOUT seconds to wait for the cluster (default 120)
#   PG_HA_STRICT        true: synchronous_mode_strict (default false)
#   PG_BINDIR           the PostgreSQL binaries (default: pgtemp's)
#
# On success `start` prints, one a line, on stdout:
#   PG_HA_DSN=postgres://...@127.0.0.1:<haproxy port>/postgres?sslmode=disable
#   PG_HA_MEMBERS=<dsn of m1>,<dsn of m2>,<dsn of m3>
# so callers can do:  while read -r l; do export "$l"; done < <(scripts/pg-ha-local.sh start)
# Everything else goes to stderr.
#
# Faults (`fault KIND`), each on the member that is primary (or, for
# sync-lost, synchronous standby) at the time; each prints the member hit:
#   postmaster-kill  kill -9 of the primary's postmaster (Patroni restarts
#                    it, or fails over if it does not come back in time)
#   patroni-term     SIGTERM to the primary's Patroni: it stops PostgreSQL
#                    and gives the leader key up (a clean failover)
#   node-crash       kill -9 of the primary's Patroni and every PostgreSQL
#                    process of it: the leader key expires after ttl
#   switchover       a planned switchover to the synchronous standby
#   patroni-restart  kill -9 of the primary's Patroni, then a new one on
#                    the same data at once
#   sync-lost        node-crash of the synchronous standby
# `rejoin` starts Patroni again for every member whose Patroni is not
# running (a demoted primary rejoins through pg_rewind) and waits until the
# three members stream from the leader.
set -Eeuo pipefail
trap 'echo "pg-ha-local: ERROR: unexpected failure at line ${LINENO}: ${BASH_COMMAND}" >&2' ERR

# The ONE place Patroni's version is written. Nothing older than 3.1.2 is
# accepted (PATRONI_MIN below): before it, a Patroni killed and restarted
# while its PostgreSQL kept running could take the leader key on a stale
# view and have acknowledged synchronous writes rewound away; measured
# here with Debian's 3.0.2, 523 acknowledged rows lost in one run, none
# with 4.1.5. Debian's package is that 3.0.2, so Patroni comes from PyPI.
PATRONI_VERSION="${PATRONI_VERSION:-4.1.5}"
PATRONI_MIN="3.1.2"

BASE="${PG_HA_BASE_PORT:-25432}"
TTL="${PG_HA_TTL:-20}"
LOOP_WAIT="${PG_HA_LOOP_WAIT:-2}"
START_TIMEOUT="${PG_HA_START_TIMEOUT:-120}"
STRICT="${PG_HA_STRICT:-false}"
# retry_timeout: Patroni demands loop_wait + 2*retry_timeout <= ttl.
RETRY_TIMEOUT=$(((TTL - LOOP_WAIT) / 2))
SCOPE="payment-ha"
MEMBERS=(m1 m2 m3)

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
HA_DIR="${ROOT}/.pg-ha"
VENV="${HA_DIR}/venv-${PATRONI_VERSION}"
RUN="${HA_DIR}/run"

ETCD_PORT=$((BASE + 200))
ETCD_PEER_PORT=$((BASE + 201))
PROXY_PORT=$((BASE + 300))

# Debian installs HAProxy in /usr/sbin, which a normal user's PATH may lack.
HAPROXY="$(command -v haproxy || echo /usr/sbin/haproxy)"

log() { echo "pg-ha-local: $*" >&2; }
die() { echo "pg-ha-local: ERROR: $*" >&2; exit 1; }

member_index() { local i; for i in 0 1 2; do [[ "${MEMBERS[$i]}" == "$1" ]] && { echo "$i"; return; }; done; return 1; }
pg_port() { echo $((BASE + $(member_index "$1"))); }
api_port() { echo $((BASE + 100 + $(member_index "$1"))); }
data_dir() { echo "${RUN}/$1/data"; }

port_open() { timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1" 2>/dev/null; }

alive() {
  kill -0 "$1" 2>/dev/null || return 1
  [[ "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" != "Z" ]]
}

# pid_of NAME MATCH: the pid in RUN/NAME.pid if that process is alive and
# its command line holds MATCH, so a recycled pid is never taken for ours.
pid_of() {
  local file="${RUN}/$1.pid" pid
  [[ -f "$file" ]] || return 1
  pid="$(cat "$file")"
  [[ "$pid" =~ ^[0-9]+$ ]] && alive "$pid" || return 1
  tr '\0' ' ' <"/proc/${pid}/cmdline" 2>/dev/null | grep -qF -- "$2" || return 1
  echo "$pid"
}
etcd_pid() { pid_of etcd "${RUN}/etcd"; }
proxy_pid() { pid_of haproxy "${RUN}/haproxy.cfg"; }
patroni_pid() { pid_of "$1/patroni" "${RUN}/$1/patroni.yml"; }
# The postmaster's pid, from its data directory's postmaster.pid.
postmaster_pid() {
  local f pid
  f="$(data_dir "$1")/postmaster.pid"
  pid="$(head -n1 "$f" 2>/dev/null)" || return 1
  [[ "$pid" =~ ^[0-9]+$ ]] && alive "$pid" || return 1
  tr '\0' ' ' <"/proc/${pid}/cmdline" 2>/dev/null | grep -qF -- "$(data_dir "$1")" || return 1
  echo "$pid"
}

# stop_pid PID: TERM, KILL after 30 s, wait until it is gone.
stop_pid() {
  local pid="$1" deadline
  kill -TERM "$pid" 2>/dev/null || return 0
  deadline=$((SECONDS + 30))
  while alive "$pid"; do
    if ((SECONDS >= deadline)); then
      kill -KILL "$pid" 2>/dev/null || true
      deadline=$((SECONDS + 10))
      while alive "$pid" && ((SECONDS < deadline)); do sleep 0.1; done
      break
    fi
    sleep 0.1
  done
}

kill9_wait() {
  local pid
  for pid in "$@"; do kill -KILL "$pid" 2>/dev/null || true; done
  for pid in "$@"; do
    local deadline=$((SECONDS + 10))
    while alive "$pid" && ((SECONDS < deadline)); do sleep 0.05; done
  done
}

# PostgreSQL refuses to run as root, and Patroni runs it as itself: as
# root, Patroni runs as the `postgres` user that Debian's package creates,
# else `nobody`, as internal/pgtemp runs the server.
RUN_AS=()
pick_user() {
  RUN_AS=()
  ((EUID == 0)) || return 0
  local u
  if id postgres >/dev/null 2>&1; then u=postgres; else u=nobody; fi
  RUN_AS=(setpriv --reuid "$u" --regid "$(id -g "$u")" --init-groups --)
  RUN_USER="$u"
}

# The binaries pgtemp uses (PG_BINDIR, else installed, else downloaded).
find_bindir() {
  local dir
  if [[ -n "${PG_BINDIR:-}" ]]; then
    dir="$PG_BINDIR"
  else
    dir="$(cd "$ROOT" && go run ./internal/pgtemp/cmd/pgtemp-binaries)" || die "no PostgreSQL binaries (internal/pgtemp found none)"
  fi
  local b
  # Patroni bootstraps with initdb, clones with pg_basebackup and rejoins
  # a demoted primary with pg_rewind.
  for b in initdb postgres pg_ctl pg_basebackup pg_rewind pg_controldata; do
    [[ -x "${dir}/${b}" ]] || die "${dir} has no ${b}; Patroni needs it (apt-get install postgresql-15, or set PG_BINDIR)"
  done
  local v
  v="$("${dir}/postgres" --version | sed -n 's/.* \([0-9][0-9]*\)\..*/\1/p')"
  [[ "$v" == 15 ]] || log "warning: ${dir} is PostgreSQL ${v}, not 15"
  echo "$dir"
}

version_ge() { [[ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n1)" == "$2" ]]; }

ensure_patroni() {
  version_ge "$PATRONI_VERSION" "$PATRONI_MIN" || die "Patroni ${PATRONI_VERSION} is older than ${PATRONI_MIN}: it loses acknowledged writes when killed and restarted (see the top of this script)"
  if [[ -x "${VENV}/bin/patroni" ]] && [[ "$("${VENV}/bin/patroni" --version 2>/dev/null)" == "patroni ${PATRONI_VERSION}" ]]; then
    return 0
  fi
  log "installing Patroni ${PATRONI_VERSION} into ${VENV} (first run only)"
  rm -rf -- "$VENV"
  mkdir -p "$HA_DIR"
  # Patroni starts each postmaster through a Python it spawns by the
  # venv's interpreter, as the user it runs as: that user must be able to
  # run it. Root's own Python (pyenv under /root, closed to others) is not
  # such, so as root the first python3 that user can run makes the venv.
  local py="" cand
  for cand in "$(command -v python3)" /usr/bin/python3; do
    [[ -x "$cand" ]] || continue
    if "${RUN_AS[@]}" "$cand" -c 'import venv' 2>/dev/null; then py="$cand"; break; fi
  done
  [[ -n "$py" ]] || die "no python3 that ${RUN_USER:-this user} can run (apt-get install python3-venv)"
  "$py" -m venv "$VENV" || die "${py} -m venv failed (apt-get install python3-venv)"
  "${VENV}/bin/pip" install -q "patroni[etcd3,psycopg3]==${PATRONI_VERSION}" >&2 || { rm -rf -- "$VENV"; die "pip could not install Patroni ${PATRONI_VERSION}"; }
  # As root, Patroni runs as another user, who must read the venv.
  chmod -R a+rX "$VENV"
}

need_commands() {
  local missing=()
  command -v etcd >/dev/null || missing+=(etcd-server)
  [[ -x "$HAPROXY" ]] || missing+=(haproxy)
  command -v python3 >/dev/null || missing+=(python3-venv)
  ((${#missing[@]} == 0)) || die "missing Debian packages: ${missing[*]} (scripts/install-test-packages.sh failover installs them as root)"
}

write_patroni_config() {
  local m="$1" bindir="$2"
  cat >"${RUN}/${m}/patroni.yml" <<EOF
# Generated by scripts/pg-ha-local.sh start.
scope: ${SCOPE}
name: ${m}
log:
  level: INFO
restapi:
  listen: 127.0.0.1:$(api_port "$m")
  connect_address: 127.0.0.1:$(api_port "$m")
etcd3:
  hosts: 127.0.0.1:${ETCD_PORT}
bootstrap:
  dcs:
    ttl: ${TTL}
    loop_wait: ${LOOP_WAIT}
    retry_timeout: ${RETRY_TIMEOUT}
    maximum_lag_on_failover: 1048576
    # A commit returns only once a standby has it; Patroni promotes only
    # the synchronous standby, so no acknowledged commit is lost.
    synchronous_mode: true
    synchronous_mode_strict: ${STRICT}
    postgresql:
      use_pg_rewind: true
      use_slots: true
      parameters:
        wal_level: replica
        wal_log_hints: "on"
        hot_standby: "on"
        max_connections: 200
        max_wal_senders: 10
        max_replication_slots: 10
        wal_keep_size: 256MB
        fsync: "on"
  initdb:
    - encoding: UTF8
    - locale: C
postgresql:
  listen: 127.0.0.1:$(pg_port "$m")
  connect_address: 127.0.0.1:$(pg_port "$m")
  data_dir: $(data_dir "$m")
  bin_dir: ${bindir}
  pgpass: ${RUN}/${m}/pgpass
  authentication:
    superuser:
      username: postgres
      password: postgres
    replication:
      username: replicator
      password: replicator
    rewind:
      username: postgres
      password: postgres
  parameters:
    unix_socket_directories: ${RUN}/${m}
    logging_collector: "on"
    log_directory: ${RUN}/${m}/log
    log_filename: postgresql.log
  pg_hba:
    - local all all trust
    - host all all 127.0.0.1/32 trust
    - host replication all 127.0.0.1/32 trust
tags:
  nofailover: false
  noloadbalance: false
EOF
}

write_proxy_config() {
  local m
  {
    cat <<EOF
# Generated by scripts/pg-ha-local.sh start.
global
  maxconn 1000
defaults
  mode tcp
  timeout connect 2s
  timeout client 30m
  timeout server 30m
  timeout check 1s
listen primary
  bind 127.0.0.1:${PROXY_PORT}
  option httpchk
  http-check send meth GET uri /primary
  http-check expect status 200
  # Checked every 500 ms; one failed check marks a member down, and every
  # session through it is cut then (on-marked-down shutdown-sessions):
  # a demoted primary keeps no client that could still read or write it.
  default-server inter 500ms fall 1 rise 1 on-marked-down shutdown-sessions
EOF
    for m in "${MEMBERS[@]}"; do
      echo "  server ${m} 127.0.0.1:$(pg_port "$m") check port $(api_port "$m")"
    done
  } >"${RUN}/haproxy.cfg"
}

start_etcd() {
  etcd_pid >/dev/null && return 0
  mkdir -p "${RUN}/etcd"
  nohup etcd --name pgha --data-dir "${RUN}/etcd" \
    --listen-client-urls "http://127.0.0.1:${ETCD_PORT}" --advertise-client-urls "http://127.0.0.1:${ETCD_PORT}" \
    --listen-peer-urls "http://127.0.0.1:${ETCD_PEER_PORT}" --initial-advertise-peer-urls "http://127.0.0.1:${ETCD_PEER_PORT}" \
    --initial-cluster "pgha=http://127.0.0.1:${ETCD_PEER_PORT}" \
    </dev/null >>"${RUN}/etcd.log" 2>&1 9>&- &
  echo $! >"${RUN}/etcd.pid"
  local deadline=$((SECONDS + 30))
  until curl -sf "http://127.0.0.1:${ETCD_PORT}/health" >/dev/null 2>&1; do
    etcd_pid >/dev/null || { tail -n 30 "${RUN}/etcd.log" >&2; die "etcd exited"; }
    ((SECONDS < deadline)) || die "etcd not healthy within 30s"
    sleep 0.2
  done
}

start_patroni() {
  local m="$1"
  patroni_pid "$m" >/dev/null && return 0
  # Patroni's own pid: setpriv execs it in place, nohup too.
  (
    cd "${RUN}/${m}"
    nohup "${RUN_AS[@]}" "${VENV}/bin/patroni" "${RUN}/${m}/patroni.yml" \
      </dev/null >>"${RUN}/${m}/patroni.log" 2>&1 9>&- &
    echo $! >"${RUN}/${m}/patroni.pid"
  )
}

start_proxy() {
  proxy_pid >/dev/null && return 0
  nohup "$HAPROXY" -db -f "${RUN}/haproxy.cfg" </dev/null >>"${RUN}/haproxy.log" 2>&1 9>&- &
  echo $! >"${RUN}/haproxy.pid"
  local deadline=$((SECONDS + 15))
  until port_open "$PROXY_PORT"; do
    proxy_pid >/dev/null || { tail -n 20 "${RUN}/haproxy.log" >&2; die "haproxy exited"; }
    ((SECONDS < deadline)) || die "haproxy not listening within 15s"
    sleep 0.1
  done
}

# role M: what the member's Patroni says it is (primary, replica, ...).
role() { curl -s --max-time 2 "http://127.0.0.1:$(api_port "$1")/patroni" 2>/dev/null | python3 -c 'import json,sys
try: print(json.load(sys.stdin).get("role",""))
except Exception: print("")' 2>/dev/null || true; }

cluster_json() { curl -sf --max-time 2 "http://127.0.0.1:$1/cluster" 2>/dev/null; }

# The members' roles and states from any Patroni that answers.
cluster() {
  local m out
  for m in "${MEMBERS[@]}"; do
    out="$(cluster_json "$(api_port "$m")")" && { echo "$out"; return 0; }
  done
  return 1
}

# primary: the member Patroni calls leader; sync: the synchronous standby.
member_with_role() {
  local want="$1"
  cluster | python3 -c 'import json,sys
want=sys.argv[1]
for m in json.load(sys.stdin).get("members",[]):
    r=m.get("role")
    if (want=="leader" and r=="leader") or (want=="sync" and r=="sync_standby"):
        print(m["name"]); break' "$want" 2>/dev/null
}

# healthy: a leader, and the two others streaming, one of them synchronous,
# and HAProxy's port answering.
healthy() {
  cluster | python3 -c 'import json,sys
ms=json.load(sys.stdin).get("members",[])
lead=[m for m in ms if m.get("role")=="leader" and m.get("state")=="running"]
stream=[m for m in ms if m.get("role") in ("replica","sync_standby") and m.get("state")=="streaming"]
sync=[m for m in ms if m.get("role")=="sync_standby"]
sys.exit(0 if len(lead)==1 and len(stream)==2 and len(sync)>=1 else 1)' 2>/dev/null
}

# every_member_up: each member's own Patroni answers 200 on /health (its
# PostgreSQL runs). The cluster's view alone comes from etcd, where a
# crashed member still looks as it was until its keys expire.
every_member_up() {
  local m
  for m in "${MEMBERS[@]}"; do
    curl -sf --max-time 2 -o /dev/null "http://127.0.0.1:$(api_port "$m")/health" || return 1
  done
}

wait_healthy() {
  local deadline=$((SECONDS + START_TIMEOUT)) m
  until healthy && every_member_up && curl -sf --max-time 2 -o /dev/null "http://127.0.0.1:$(api_port "$(member_with_role leader)")/primary"; do
    if ((SECONDS >= deadline)); then
      for m in "${MEMBERS[@]}"; do tail -n 15 "${RUN}/${m}/patroni.log" >&2 || true; done
      cluster >&2 || true
      die "the cluster is not healthy within ${START_TIMEOUT}s"
    fi
    sleep 0.5
  done
}

print_env() {
  local m dsns=()
  for m in "${MEMBERS[@]}"; do dsns+=("postgres://postgres@127.0.0.1:$(pg_port "$m")/postgres?sslmode=disable"); done
  echo "PG_HA_DSN=postgres://postgres@127.0.0.1:${PROXY_PORT}/postgres?sslmode=disable"
  (IFS=,; echo "PG_HA_MEMBERS=${dsns[*]}")
}

cmd_start() {
  need_commands
  pick_user
  if healthy 2>/dev/null && proxy_pid >/dev/null; then
    log "already running"
    print_env
    return 0
  fi
  if [[ -d "$RUN" ]] && { etcd_pid || proxy_pid || patroni_pid m1 || patroni_pid m2 || patroni_pid m3; } >/dev/null; then
    die "a stack is half running in ${RUN}: run $0 stop first"
  fi
  local p m
  for p in "$BASE" $((BASE + 1)) $((BASE + 2)) $((BASE + 100)) $((BASE + 101)) $((BASE + 102)) "$ETCD_PORT" "$ETCD_PEER_PORT" "$PROXY_PORT"; do
    port_open "$p" && die "127.0.0.1:${p} is in use; set PG_HA_BASE_PORT"
  done
  local bindir
  bindir="$(find_bindir)"
  ensure_patroni
  rm -rf -- "$RUN"
  mkdir -p "$RUN"
  for m in "${MEMBERS[@]}"; do
    mkdir -p "${RUN}/${m}/log"
    write_patroni_config "$m" "$bindir"
  done
  write_proxy_config
  if ((EUID == 0)); then
    chmod 755 "$HA_DIR" "$RUN"
    for m in "${MEMBERS[@]}"; do chown -R "${RUN_USER}:" "${RUN}/${m}"; done
  fi
  start_etcd
  log "etcd on 127.0.0.1:${ETCD_PORT}"
  # The first member bootstraps alone, so that it is the one that does.
  start_patroni m1
  local deadline=$((SECONDS + START_TIMEOUT))
  until [[ "$(role m1)" == primary ]]; do
    patroni_pid m1 >/dev/null || { tail -n 30 "${RUN}/m1/patroni.log" >&2; die "m1's Patroni exited"; }
    ((SECONDS < deadline)) || { tail -n 30 "${RUN}/m1/patroni.log" >&2; die "m1 did not bootstrap within ${START_TIMEOUT}s"; }
    sleep 0.3
  done
  start_patroni m2
  start_patroni m3
  start_proxy
  wait_healthy
  log "ready: primary $(member_with_role leader), synchronous standby $(member_with_role sync), HAProxy on 127.0.0.1:${PROXY_PORT}"
  print_env
}

cmd_stop() {
  local m pid
  pid="$(proxy_pid)" && { log "stopping haproxy (${pid})"; stop_pid "$pid"; }
  for m in "${MEMBERS[@]}"; do
    pid="$(patroni_pid "$m")" && { log "stopping ${m}'s Patroni (${pid})"; stop_pid "$pid"; }
  done
  # A Patroni killed by a fault leaves its PostgreSQL running.
  for m in "${MEMBERS[@]}"; do
    pid="$(postmaster_pid "$m")" && { log "stopping ${m}'s PostgreSQL (${pid})"; stop_pid "$pid"; }
  done
  pid="$(etcd_pid)" && { log "stopping etcd (${pid})"; stop_pid "$pid"; }
  rm -rf -- "$RUN"
}

cmd_status() {
  local m out
  out="$(cluster)" || { log "not running"; return 1; }
  python3 -c 'import json,sys
for m in json.load(sys.stdin)["members"]:
    print("%-4s %-13s %-10s lag=%s timeline=%s" % (m["name"], m.get("role"), m.get("state"), m.get("lag","-"), m.get("timeline","-")))' <<<"$out" >&2
  healthy || { log "not healthy"; return 1; }
  print_env
}

cmd_rejoin() {
  pick_user
  local m
  for m in "${MEMBERS[@]}"; do
    if ! patroni_pid "$m" >/dev/null; then
      log "starting ${m}'s Patroni again"
      start_patroni "$m"
    fi
  done
  wait_healthy
  log "healthy: primary $(member_with_role leader), synchronous standby $(member_with_role sync)"
}

# crash M: kill -9 of the member's Patroni and every process of its
# PostgreSQL at once, as a machine that loses power.
crash() {
  local m="$1" pids=() p pm
  p="$(patroni_pid "$m")" && pids+=("$p")
  if pm="$(postmaster_pid "$m")"; then
    pids+=("$pm")
    pids+=($(pgrep -P "$pm" || true))
  fi
  kill9_wait "${pids[@]}"
}

cmd_fault() {
  local kind="${1:-}" m
  pick_user
  case "$kind" in
  sync-lost) m="$(member_with_role sync)" ;;
  postmaster-kill | patroni-term | node-crash | switchover | patroni-restart) m="$(member_with_role leader)" ;;
  *) die "usage: $0 fault postmaster-kill|patroni-term|node-crash|switchover|patroni-restart|sync-lost" ;;
  esac
  [[ -n "$m" ]] || die "fault ${kind}: no member has the role it needs (cluster unhealthy?)"
  case "$kind" in
  postmaster-kill) kill9_wait "$(postmaster_pid "$m")" ;;
  patroni-term)
    # It stops PostgreSQL and gives the leader key up before it exits:
    # wait for that, so that a rejoin right after finds it gone.
    local pid deadline
    pid="$(patroni_pid "$m")"
    kill -TERM "$pid"
    deadline=$((SECONDS + 60))
    while alive "$pid" && ((SECONDS < deadline)); do sleep 0.1; done
    ;;
  node-crash | sync-lost) crash "$m" ;;
  patroni-restart)
    kill9_wait "$(patroni_pid "$m")"
    start_patroni "$m"
    ;;
  switchover)
    local to
    to="$(member_with_role sync)"
    [[ -n "$to" ]] || die "switchover: no synchronous standby"
    curl -sf --max-time 30 -X POST -H 'Content-Type: application/json' \
      -d "{\"leader\":\"${m}\",\"candidate\":\"${to}\"}" \
      "http://127.0.0.1:$(api_port "$m")/switchover" >&2 || die "switchover refused"
    echo >&2
    ;;
  esac
  log "fault ${kind} on ${m}"
  echo "$m"
}

with_lock() {
  command -v flock >/dev/null || { "$@"; return; }
  mkdir -p "$HA_DIR"
  exec 9>"${HA_DIR}/lock"
  flock -w 600 9 || die "timed out waiting for another pg-ha-local.sh in this checkout"
  "$@"
}

case "${1:-}" in
start) with_lock cmd_start ;;
stop) with_lock cmd_stop ;;
rejoin) with_lock cmd_rejoin ;;
status) cmd_status || exit $? ;;
fault) shift; with_lock cmd_fault "$@" ;;
*)
  echo "usage: $0 start|stop|status|rejoin|fault KIND" >&2
  exit 2
  ;;
esac
