#!/usr/bin/env bash
# scripts/kafka-local.sh start|stop|status|pause [kill]|resume
#
# Runs a real, single-node Apache Kafka broker (KRaft combined mode: one JVM
# is both broker and controller) on loopback, for tests. No Docker and no
# tarball download: the broker jars come from Maven with `mvn`, so the only
# network it needs is the Maven repository that `mvn` is configured for, and
# only on the first run (after that everything is in ~/.m2).
#
# Layout (all under the git-ignored .kafka/ at the repo root):
#   .kafka/<version>/pom.xml         generated pom that names the broker jars
#   .kafka/<version>/classpath.txt   resolved classpath (paths into ~/.m2)
#   .kafka/<version>/mvn.log         output of the last mvn run
#   .kafka/run/                      pid, port, server.properties, broker.log
# The broker's data (log.dirs) lives in a fresh temp dir per start and is
# removed by `stop`. broker.log is kept after `stop` for post-mortems.
#
# Environment (all optional):
#   KAFKA_VERSION            broker version; keep in step with the image tag
#                            apache/kafka:<version> in docker-compose.yml
#   KAFKA_PORT               PLAINTEXT listener port         (default 19092)
#   KAFKA_CONTROLLER_PORT    KRaft controller listener port  (default 19093)
#   KAFKA_START_TIMEOUT      seconds to wait for the broker  (default 90)
#   KAFKA_STOP_TIMEOUT       seconds between TERM and KILL   (default 30)
#   KAFKA_MVN_TIMEOUT        seconds allowed per mvn run     (default 900)
#   KAFKA_HEAP_OPTS          JVM heap flags                  (default -Xmx512m)
#   JAVA_HOME                Java 17+ to use (default: java on PATH)
#
# `pause` stops the running broker and keeps its data (TERM, a clean
# shutdown; `pause kill` sends KILL, a crash); `resume` starts it again on
# that data, on the same ports, and waits until it is ready. Together they
# are a broker outage in the middle of a test (test/fault): every
# acknowledged record must still be there afterwards.
#
# On success `start` (and `resume`) prints exactly one line on stdout:
#   KAFKA_BROKERS=127.0.0.1:<port>
# so callers can do:  out="$(scripts/kafka-local.sh start)" && export "$out"
# Everything else (progress, errors) goes to stderr.
set -Eeuo pipefail
# Never fail silently: any unexpected failing command names its line.
trap 'echo "kafka-local: ERROR: unexpected failure at line ${LINENO}: ${BASH_COMMAND}" >&2' ERR

# The ONE place the Kafka version is written. docker-compose.yml pins the
# same version as apache/kafka:<version>.
KAFKA_VERSION="${KAFKA_VERSION:-4.4.0}"

KAFKA_PORT="${KAFKA_PORT:-19092}"
KAFKA_CONTROLLER_PORT="${KAFKA_CONTROLLER_PORT:-19093}"
KAFKA_START_TIMEOUT="${KAFKA_START_TIMEOUT:-90}"
KAFKA_STOP_TIMEOUT="${KAFKA_STOP_TIMEOUT:-30}"
KAFKA_MVN_TIMEOUT="${KAFKA_MVN_TIMEOUT:-900}"
KAFKA_HEAP_OPTS="${KAFKA_HEAP_OPTS:--Xmx512m}"

# Pin the plugin version so a warm cache needs no plugin-metadata lookup and
# the result does not drift with whatever `dependency:` resolves to today.
MVN_DEP_PLUGIN="org.apache.maven.plugins:maven-dependency-plugin:3.8.1"

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
KAFKA_DIR="${ROOT}/.kafka"
CACHE_DIR="${KAFKA_DIR}/${KAFKA_VERSION}"
CLASSPATH_FILE="${CACHE_DIR}/classpath.txt"
RUN_DIR="${KAFKA_DIR}/run"
PID_FILE="${RUN_DIR}/broker.pid"
PORT_FILE="${RUN_DIR}/broker.port"
CTRL_PORT_FILE="${RUN_DIR}/controller.port"
DATA_FILE="${RUN_DIR}/broker.datadir"
PROPS_FILE="${RUN_DIR}/server.properties"
LOG_FILE="${RUN_DIR}/broker.log"

JAVA="${JAVA_HOME:+${JAVA_HOME}/bin/}java"

log() { echo "kafka-local: $*" >&2; }
die() { echo "kafka-local: ERROR: $*" >&2; exit 1; }

# Print the tail of a log file to stderr (used on every failure path).
show_tail() {
  local file="$1" n="${2:-60}"
  if [[ -s "$file" ]]; then
    echo "----- last ${n} lines of ${file} -----" >&2
    tail -n "$n" "$file" >&2
    echo "----- end of ${file} -----" >&2
  fi
}

# True if something accepts TCP connections on 127.0.0.1:$1. Plain bash
# /dev/tcp, bounded by `timeout` so a black-holed port cannot hang us.
port_open() {
  timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1" 2>/dev/null
}

# --- Tiny Kafka protocol client in bash (no Kafka CLI/JVM start needed) ---
# Hex of a Kafka protocol STRING: int16 length, then the bytes.
kstr() { printf '%04x' "${#1}"; printf '%s' "$1" | od -An -tx1 | tr -d ' \n'; }

# kafka_call PORT API_KEY API_VERSION BODY_HEX NBYTES
# Sends one request (header: api_key, api_version, correlation id 7,
# client id "kafka-local", then BODY_HEX) and prints the first NBYTES of the
# reply as hex: [0:8] size, [8:16] correlation id, then the response body.
# Bounded to 5 s; prints nothing if the port is closed or silent.
kafka_call() {
  local req esc
  req="$(printf '%04x%04x%08x' "$2" "$3" 7)$(kstr kafka-local)$4"
  esc="$(printf '%08x%s' $(( ${#req} / 2 )) "$req" | sed 's/../\\x&/g')"
  # shellcheck disable=SC2016  # $1..$3 are expanded by the inner bash
  timeout 5 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 1
    printf "$2" >&3
    head -c "$3" <&3 | od -An -tx1 | tr -d " \n"' _ "$1" "$esc" "$5" 2>/dev/null || true
}

# True if the broker on 127.0.0.1:$1 answers ApiVersions v0 (api key 18)
# with our correlation id and error_code 0. An open port alone only proves
# that the acceptor is bound, not that requests are served.
kafka_answers() {
  local reply
  reply="$(kafka_call "$1" 18 0 "" 10)"
  [[ "${reply:8:12}" == "000000070000" ]]
}

# True once the group coordinator is usable: FindCoordinator v0 (api key 10)
# for a dummy group returns error_code 0. The first such request also makes
# the broker create __consumer_offsets. Without this warm-up the first
# consumer-group join after a fresh start gets COORDINATOR_NOT_AVAILABLE /
# NOT_COORDINATOR, and kafka-go's Reader then waits JoinGroupBackoff (5 s).
group_coordinator_ready() {
  local reply
  reply="$(kafka_call "$1" 10 0 "$(kstr kafka-local-warmup)" 10)"
  [[ "${reply:8:12}" == "000000070000" ]]
}

# Same for the transaction coordinator: FindCoordinator v1 with key_type 1
# (reply: correlation id, throttle_time_ms, error_code). Creates
# __transaction_state, so the first transactional InitProducerId does not
# get NOT_COORDINATOR.
txn_coordinator_ready() {
  local reply
  reply="$(kafka_call "$1" 10 1 "$(kstr kafka-local-warmup)01" 14)"
  [[ "${reply:8:8}" == "00000007" && "${reply:24:4}" == "0000" ]]
}

# Same for producer ids: InitProducerId v0 (api key 22) with a null
# transactional id, as an idempotent producer sends it. On a fresh KRaft
# broker the first one gets COORDINATOR_LOAD_IN_PROGRESS while the broker
# fetches a block of producer ids from the controller.
producer_ids_ready() {
  local reply
  reply="$(kafka_call "$1" 22 0 "ffff7fffffff" 14)"
  [[ "${reply:8:8}" == "00000007" && "${reply:24:4}" == "0000" ]]
}

# The pid in the pid file, if that process is alive AND is our broker (the
# command line names our server.properties) -- so a recycled pid is never
# mistaken for the broker, and never killed.
running_pid() {
  local pid
  [[ -f "$PID_FILE" ]] || return 1
  pid="$(cat "$PID_FILE" 2>/dev/null)"
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  alive "$pid" || return 1
  tr '\0' ' ' <"/proc/${pid}/cmdline" 2>/dev/null | grep -qF "kafka.Kafka ${PROPS_FILE}" || return 1
  echo "$pid"
}

# Remove the temp data dir and the pid/port files. Only removes a data dir
# that looks like one we created (kafka-local.XXXXXX), never anything else.
cleanup_state() {
  local data
  if [[ -f "$DATA_FILE" ]]; then
    data="$(cat "$DATA_FILE")"
    if [[ -n "$data" && -d "$data" && "$(basename "$data")" == kafka-local.* ]]; then
      rm -rf -- "$data"
    fi
  fi
  rm -f -- "$PID_FILE" "$PORT_FILE" "$CTRL_PORT_FILE" "$DATA_FILE"
}

# Run one `mvn dependency:build-classpath` over a generated pom. Bounded by
# KAFKA_MVN_TIMEOUT. Uses Maven's own settings (~/.m2/settings.xml, mirrors)
# and the default local repository, so jars are shared with other builds.
mvn_classpath() {
  local pom="$1" out="$2"
  if ! timeout "$KAFKA_MVN_TIMEOUT" mvn -B -f "$pom" \
      "${MVN_DEP_PLUGIN}:build-classpath" \
      -Dmdep.includeScope=runtime -Dmdep.outputFile="$out" \
      >>"${CACHE_DIR}/mvn.log" 2>&1; then
    show_tail "${CACHE_DIR}/mvn.log" 40
    die "mvn could not resolve org.apache.kafka:kafka_2.13:${KAFKA_VERSION} and its runtime dependencies (see ${CACHE_DIR}/mvn.log). Is the Maven repository reachable and does that version exist?"
  fi
  [[ -s "$out" ]] || die "mvn succeeded but wrote no classpath to ${out}"
}

write_pom() {
  local pom="$1" extra="$2"
  cat >"$pom" <<EOF
<?xml version="1.0" encoding="UTF-8"?>
<!-- Generated by scripts/kafka-local.sh; only used to resolve broker jars. -->
<project>
  <modelVersion>4.0.0</modelVersion>
  <groupId>local.payment-service</groupId>
  <artifactId>kafka-local-broker</artifactId>
  <version>0</version>
  <packaging>pom</packaging>
  <dependencies>
    <!-- The broker (kafka.Kafka, kafka.tools.StorageTool). Its runtime
         dependencies bring kafka-server, kafka-metadata, kafka-raft,
         kafka-storage, the coordinators, scala-library, ... -->
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka_2.13</artifactId>
      <version>${KAFKA_VERSION}</version>
    </dependency>${extra}
  </dependencies>
</project>
EOF
}

# Make sure CLASSPATH_FILE exists and every jar in it is present. A warm
# cache does not run mvn at all (fast, and works offline).
ensure_classpath() {
  if [[ -s "$CLASSPATH_FILE" ]]; then
    local ok=1 jar jars
    # (read returns 1 at EOF: the file has no trailing newline)
    IFS=: read -r -a jars <"$CLASSPATH_FILE" || true
    for jar in "${jars[@]}"; do [[ -f "$jar" ]] || { ok=0; break; }; done
    [[ $ok == 1 ]] && return 0
    log "cached classpath refers to missing jars; resolving again"
  fi

  command -v mvn >/dev/null || die "mvn not found on PATH (needed once to fetch the Kafka jars)"
  mkdir -p "$CACHE_DIR"
  : >"${CACHE_DIR}/mvn.log"
  log "resolving Apache Kafka ${KAFKA_VERSION} broker jars with mvn (first run only)..."

  # Pass 1: the broker alone. The Kafka poms ship slf4j-api but no slf4j
  # binding (the distribution tarball adds one), and without a binding the
  # broker logs nothing -- we need its log to see it start and to debug.
  local cp1="${CACHE_DIR}/classpath.pass1.txt" slf4j_ver
  write_pom "${CACHE_DIR}/pom.xml" ""
  mvn_classpath "${CACHE_DIR}/pom.xml" "$cp1"
  grep -q "kafka_2.13-${KAFKA_VERSION}.jar" "$cp1" || die "resolved classpath has no kafka_2.13-${KAFKA_VERSION}.jar"
  slf4j_ver="$(tr ':' '\n' <"$cp1" | sed -n 's#.*/slf4j-api-\([^/]*\)\.jar$#\1#p' | head -n1)"
  [[ -n "$slf4j_ver" ]] || die "resolved classpath has no slf4j-api jar; cannot pick a log binding"

  # Pass 2: add slf4j-simple at exactly the slf4j-api version Kafka chose,
  # so Maven's mediation changes nothing else. slf4j-simple needs no config
  # file and writes plain lines to the broker log.
  write_pom "${CACHE_DIR}/pom.xml" "
    <!-- Log binding, same version as the slf4j-api that Kafka uses. -->
    <dependency>
      <groupId>org.slf4j</groupId>
      <artifactId>slf4j-simple</artifactId>
      <version>${slf4j_ver}</version>
    </dependency>"
  mvn_classpath "${CACHE_DIR}/pom.xml" "${CLASSPATH_FILE}.tmp"
  mv -f "${CLASSPATH_FILE}.tmp" "$CLASSPATH_FILE"
  rm -f "$cp1"
  log "classpath cached in ${CLASSPATH_FILE}"
}

check_java() {
  command -v "$JAVA" >/dev/null || die "java not found (set JAVA_HOME or put Java 17+ on PATH)"
  local spec
  spec="$("$JAVA" -XshowSettings:properties -version 2>&1 | sed -n 's/^ *java\.specification\.version = //p')"
  # Kafka 4.x brokers are compiled for Java 17 (class file version 61).
  if [[ "$spec" =~ ^[0-9]+$ ]] && (( spec < 17 )); then
    die "Java ${spec} found; the Kafka ${KAFKA_VERSION} broker needs Java 17 or newer"
  fi
}

write_server_properties() {
  local data="$1"
  cat >"$PROPS_FILE" <<EOF
# Generated by scripts/kafka-local.sh start -- single-node KRaft, loopback only.

# Combined mode: this one process is the controller quorum and the broker.
process.roles=broker,controller
node.id=1
# Static quorum of one voter (no --standalone/dynamic quorum needed).
controller.quorum.voters=1@127.0.0.1:${KAFKA_CONTROLLER_PORT}
controller.listener.names=CONTROLLER

# Bind to loopback only; clients are told to come back to the same address.
listeners=PLAINTEXT://127.0.0.1:${KAFKA_PORT},CONTROLLER://127.0.0.1:${KAFKA_CONTROLLER_PORT}
advertised.listeners=PLAINTEXT://127.0.0.1:${KAFKA_PORT}
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT

# Data in a throw-away temp dir, removed by 'stop'.
log.dirs=${data}/logs

# One node: every internal topic must have replication factor 1 / min ISR 1,
# or consumer groups, transactions and share groups cannot work.
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
# One partition (default 50) for the internal topics: they are created much
# faster, and once the warm-up in 'start' has found the coordinator, every
# group id / transactional id maps to that same, already loaded partition.
offsets.topic.num.partitions=1
transaction.state.log.num.partitions=1
share.coordinator.state.topic.num.partitions=1
default.replication.factor=1
min.insync.replicas=1

# Tests want a group to form at once, not after the default 3 s delay.
group.initial.rebalance.delay.ms=0

# Topics created implicitly get 3 partitions, so partitioning and group
# assignment are exercised even in a tiny test.
num.partitions=3
# Producing to, or asking metadata for, an unknown topic creates it (like
# the broker default). Tests that must not rely on this should create their
# topics explicitly; production clusters usually disable it.
auto.create.topics.enable=true
EOF
}

# launch_and_wait CLASSPATH: start the JVM on the server.properties in
# RUN_DIR (its log.dirs already formatted), record its pid and ports, and
# wait until it serves and its coordinators answer, bounded by
# KAFKA_START_TIMEOUT.
launch_and_wait() {
  local cp="$1" pid heap_opts
  read -r -a heap_opts <<<"$KAFKA_HEAP_OPTS"
  # Start the broker detached: stdin from /dev/null and all output to the log,
  # so `$(kafka-local.sh start)` in a caller does not wait on the broker's
  # pipes. nohup execs java in place, so $! is the JVM's pid. 9>&- keeps the
  # broker from inheriting (and so holding forever) the lock below.
  log "starting broker on 127.0.0.1:${KAFKA_PORT} (log: ${LOG_FILE})"
  nohup "$JAVA" "${heap_opts[@]}" \
    -XX:+UseG1GC -XX:+ExitOnOutOfMemoryError -Djava.awt.headless=true \
    -Dorg.slf4j.simpleLogger.showDateTime=true \
    -Dorg.slf4j.simpleLogger.dateTimeFormat="yyyy-MM-dd'T'HH:mm:ss.SSS" \
    -cp "$cp" kafka.Kafka "$PROPS_FILE" </dev/null >>"$LOG_FILE" 2>&1 9>&- &
  pid=$!
  echo "$pid" >"$PID_FILE"
  echo "$KAFKA_PORT" >"$PORT_FILE"
  echo "$KAFKA_CONTROLLER_PORT" >"$CTRL_PORT_FILE"

  # Ready = the JVM is alive, the log says the server started, and the
  # listener answers an ApiVersions request. Bounded by KAFKA_START_TIMEOUT.
  local deadline=$((SECONDS + KAFKA_START_TIMEOUT))
  while :; do
    if ! alive "$pid"; then
      show_tail "$LOG_FILE"
      cleanup_state
      die "broker process ${pid} exited during startup"
    fi
    if grep -q "Kafka Server started" "$LOG_FILE" && kafka_answers "$KAFKA_PORT"; then
      break
    fi
    if (( SECONDS >= deadline )); then
      show_tail "$LOG_FILE"
      stop_pid "$pid"
      cleanup_state
      die "broker did not become ready within ${KAFKA_START_TIMEOUT}s"
    fi
    sleep 0.5
  done
  # Warm the coordinators so the first test that joins a group or starts a
  # producer is not slowed down (or failed) by one-off startup work.
  until group_coordinator_ready "$KAFKA_PORT" && txn_coordinator_ready "$KAFKA_PORT" \
        && producer_ids_ready "$KAFKA_PORT"; do
    if ! alive "$pid"; then
      show_tail "$LOG_FILE"
      cleanup_state
      die "broker process ${pid} exited while warming up"
    fi
    if (( SECONDS >= deadline )); then
      show_tail "$LOG_FILE"
      stop_pid "$pid"
      cleanup_state
      die "broker started but its group/transaction coordinators were not ready within ${KAFKA_START_TIMEOUT}s"
    fi
    sleep 0.2
  done
}

cmd_start() {
  local pid
  if pid="$(running_pid)"; then
    log "already running (pid ${pid})"
    echo "KAFKA_BROKERS=127.0.0.1:$(cat "$PORT_FILE")"
    return 0
  fi
  mkdir -p "$RUN_DIR"
  cleanup_state   # stale pid file / data dir from a crashed run

  [[ "$KAFKA_PORT" =~ ^[0-9]+$ && "$KAFKA_CONTROLLER_PORT" =~ ^[0-9]+$ ]] || die "KAFKA_PORT and KAFKA_CONTROLLER_PORT must be numbers"
  [[ "$KAFKA_PORT" != "$KAFKA_CONTROLLER_PORT" ]] || die "KAFKA_PORT and KAFKA_CONTROLLER_PORT must differ"
  local p
  for p in "$KAFKA_PORT" "$KAFKA_CONTROLLER_PORT"; do
    if port_open "$p"; then
      die "127.0.0.1:${p} is already in use by another process (another broker from a different checkout?); stop it or set KAFKA_PORT/KAFKA_CONTROLLER_PORT"
    fi
  done

  check_java
  ensure_classpath
  local cp data cluster_id heap_opts
  cp="$(cat "$CLASSPATH_FILE")"
  # KAFKA_HEAP_OPTS may hold several flags: split on whitespace on purpose.
  read -r -a heap_opts <<<"$KAFKA_HEAP_OPTS"

  data="$(mktemp -d "${TMPDIR:-/tmp}/kafka-local.XXXXXX")"
  echo "$data" >"$DATA_FILE"
  write_server_properties "$data"
  : >"$LOG_FILE"

  # A KRaft log dir must be formatted with a cluster id before first start.
  # The id is 16 random bytes, base64url without padding (22 chars), which is
  # what `kafka-storage.sh random-uuid` produces -- without a JVM start. Like
  # Kafka's Uuid.randomUuid(), reject ids starting with '-': the format
  # command would parse such an id as an option.
  cluster_id="-"
  while [[ "$cluster_id" == -* ]]; do
    cluster_id="$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n')"
  done
  log "formatting ${data}/logs (cluster id ${cluster_id})"
  # C1-only JIT: this JVM lives ~1 s, so skipping C2 roughly halves its time.
  if ! timeout 120 "$JAVA" "${heap_opts[@]}" -XX:TieredStopAtLevel=1 -cp "$cp" kafka.tools.StorageTool \
      format -t "$cluster_id" -c "$PROPS_FILE" >>"$LOG_FILE" 2>&1; then
    show_tail "$LOG_FILE"
    cleanup_state
    die "kafka.tools.StorageTool format failed"
  fi

  launch_and_wait "$cp"
  log "broker ready (pid $(cat "$PID_FILE"))"
  echo "KAFKA_BROKERS=127.0.0.1:${KAFKA_PORT}"
}

# True if pid $1 exists and is not a zombie (an exited child that nobody has
# reaped yet still answers kill -0).
alive() {
  kill -0 "$1" 2>/dev/null || return 1
  [[ "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" != "Z" ]]
}

# TERM (Kafka shuts down cleanly on it), then KILL after KAFKA_STOP_TIMEOUT,
# then wait (bounded) for the JVM to actually go away.
stop_pid() {
  local pid="$1" deadline
  kill -TERM "$pid" 2>/dev/null || return 0
  deadline=$((SECONDS + KAFKA_STOP_TIMEOUT))
  while alive "$pid"; do
    if (( SECONDS >= deadline )); then
      log "broker ${pid} ignored TERM for ${KAFKA_STOP_TIMEOUT}s; sending KILL"
      kill -KILL "$pid" 2>/dev/null || true
      deadline=$((SECONDS + 15))
      while alive "$pid" && (( SECONDS < deadline )); do sleep 0.2; done
      break
    fi
    sleep 0.2
  done
}

# Wait (bounded) until nothing listens on the given ports any more. After
# KILL the JVM's main thread can already look dead (zombie) while its other
# threads, and so its listening sockets, are still being torn down; a
# `start` right after `stop` would then find the ports busy.
wait_ports_closed() {
  local deadline=$((SECONDS + 15)) p busy
  while :; do
    busy=""
    for p in "$@"; do port_open "$p" && busy="$p"; done
    [[ -z "$busy" ]] && return 0
    (( SECONDS >= deadline )) && { log "127.0.0.1:${busy} still accepts connections after stop"; return 1; }
    sleep 0.2
  done
}

cmd_stop() {
  local pid ports=()
  if pid="$(running_pid)"; then
    log "stopping broker (pid ${pid})"
    ports=("$(cat "$PORT_FILE")" "$(cat "$CTRL_PORT_FILE" 2>/dev/null || echo "$KAFKA_CONTROLLER_PORT")")
    stop_pid "$pid"
    if alive "$pid"; then
      die "broker ${pid} is still alive after KILL"
    fi
    wait_ports_closed "${ports[@]}" || true
  else
    log "not running"
  fi
  cleanup_state
}

# pause [kill]: stop the broker but keep its data, ports and configuration
# for resume. TERM lets it shut down cleanly; kill is a crash (KILL).
cmd_pause() {
  local how="${1:-term}" pid
  [[ "$how" == term || "$how" == kill ]] || die "usage: $0 pause [kill]"
  pid="$(running_pid)" || die "pause: no broker is running"
  log "pausing broker (pid ${pid}, ${how}); its data stays for resume"
  if [[ "$how" == kill ]]; then
    kill -KILL "$pid" 2>/dev/null || true
    local deadline=$((SECONDS + 15))
    while alive "$pid" && (( SECONDS < deadline )); do sleep 0.1; done
  else
    stop_pid "$pid"
  fi
  alive "$pid" && die "broker ${pid} is still alive"
  wait_ports_closed "$(cat "$PORT_FILE")" "$(cat "$CTRL_PORT_FILE")" || die "the broker's ports are still open after pause"
  rm -f -- "$PID_FILE"
}

# resume: start a paused broker again on its data and ports.
cmd_resume() {
  local pid
  if pid="$(running_pid)"; then
    die "resume: the broker is running (pid ${pid})"
  fi
  [[ -f "$DATA_FILE" && -d "$(cat "$DATA_FILE")" && -f "$PROPS_FILE" && -f "$PORT_FILE" ]] \
    || die "resume: no paused broker in ${RUN_DIR} (pause one first)"
  KAFKA_PORT="$(cat "$PORT_FILE")"
  KAFKA_CONTROLLER_PORT="$(cat "$CTRL_PORT_FILE")"
  check_java
  ensure_classpath
  launch_and_wait "$(cat "$CLASSPATH_FILE")"
  log "broker resumed (pid $(cat "$PID_FILE"))"
  echo "KAFKA_BROKERS=127.0.0.1:${KAFKA_PORT}"
}

cmd_status() {
  local pid
  if pid="$(running_pid)"; then
    if kafka_answers "$(cat "$PORT_FILE")"; then
      log "running (pid ${pid})"
      echo "KAFKA_BROKERS=127.0.0.1:$(cat "$PORT_FILE")"
      return 0
    fi
    log "process ${pid} is alive but the broker does not answer on 127.0.0.1:$(cat "$PORT_FILE") (still starting, or hung; see ${LOG_FILE})"
    return 1
  fi
  log "not running"
  return 1
}

# start and stop take a lock, so that e.g. several test packages calling
# `start` at once get one broker: the first starts it, the others wait and
# then find it running. Bounded like everything else.
with_lock() {
  command -v flock >/dev/null || { "$@"; return; }
  mkdir -p "$RUN_DIR"
  exec 9>"${RUN_DIR}/lock"
  flock -w $((KAFKA_MVN_TIMEOUT * 2 + KAFKA_START_TIMEOUT + KAFKA_STOP_TIMEOUT + 180)) 9 \
    || die "timed out waiting for another kafka-local.sh start/stop in this checkout"
  "$@"
}

case "${1:-}" in
  start)  with_lock cmd_start ;;
  stop)   with_lock cmd_stop ;;
  pause)  shift; with_lock cmd_pause "$@" ;;
  resume) with_lock cmd_resume ;;
  status) cmd_status || exit $? ;;   # exit 1 = not running, not an error
  *)
    echo "usage: $0 start|stop|status|pause [kill]|resume" >&2
    exit 2
    ;;
esac
