#!/usr/bin/env bash
# scripts/fresh-machine-check.sh (make fresh-machine-check): the README's two
# commands on a fresh machine, proven (docs/decisions/0026). A Debian
# bookworm root file system made by debootstrap (minbase, plus git, make and
# CA certificates), the host's Go toolchain copied in, a clone of this
# repository, entered with chroot (which shares the host's loopback; nothing
# else is needed):
#   1. as a normal user, `make dev` serves the tour's first charge
#      (201) and stops cleanly on Ctrl-C (SIGINT, exit 0);
#   2. as root, `make test` passes: scripts/install-test-packages.sh installs
#      Chromium and gcc from Debian's packages, PostgreSQL comes downloaded
#      (internal/pgtemp).
# Each step prints how long it took (docs/decisions/0026-fresh-machine-check-in-ci.md
# has the measured times, cold and warm).
#
# What comes from outside, as on the host (whose CA certificates it trusts):
# Debian's packages from the mirror
# of the host's apt sources (scripts/debian-mirror.sh), Go modules through
# the host's `go env GOPROXY`, PostgreSQL's jar from the Maven repository the
# host's Maven uses (passed in as PGTEMP_MAVEN_REPOSITORY: the fresh root has
# no Maven). Nothing is sent anywhere else. Go modules are looked up first
# in the host's module download cache, mounted read-only and named first in
# GOPROXY (a file:// proxy, as a company's module mirror would be): Go checks
# each against go.sum whatever proxy serves it, and a module the host lacks
# is downloaded through the host's GOPROXY. What is proven is that nothing is
# installed by hand, not that every byte is downloaded again.
#
# Cached under FRESH_MACHINE_CACHE (default ~/.cache/payment-service/fresh-machine):
# the debootstrap root as a tar, Debian's downloaded .debs (debootstrap's
# and apt's, one directory), and root's Go module and build caches inside
# the chroot; the normal user starts with an empty Go cache, as a newcomer
# would. Each run unpacks a new root and removes it. FRESH_MACHINE_COLD=1
# empties the cache first: a cold run, as on a machine whose cache is gone.
#
# Needs root, debootstrap, git, go, mvn, curl. Whatever happens, it ends with
# no process or mount of its own left.
set -Eeuo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=lib/unmount-under.sh
source "${ROOT}/scripts/lib/unmount-under.sh"
CACHE="${FRESH_MACHINE_CACHE:-${HOME}/.cache/payment-service/fresh-machine}"
WORK="${CACHE}/run"
FS="${WORK}/root"
PACKAGES=git,make,ca-certificates
TEST_TIMEOUT="${FRESH_MACHINE_TEST_TIMEOUT:-2400}"

started=$SECONDS
step_started=$SECONDS
log() {
  printf '\n== fresh-machine-check [%ds, step before: %ds] %s\n' "$((SECONDS - started))" "$((SECONDS - step_started))" "$*" >&2
  step_started=$SECONDS
}
die() {
  echo "fresh-machine-check: FAILED: $*" >&2
  exit 1
}

dev_pgid=""
cleanup() {
  local status=$?
  trap - EXIT INT TERM
  if [[ -n "$dev_pgid" ]]; then
    kill -KILL -- "-${dev_pgid}" 2>/dev/null || true
  fi
  # Anything still running inside the root (a test's child, a server), by id.
  local proc
  for proc in /proc/[0-9]*; do
    if [[ "$(readlink "${proc}/root" 2>/dev/null)" == "$FS" ]]; then
      kill -KILL "${proc#/proc/}" 2>/dev/null || true
    fi
  done
  # Under WORK: the root's mounts, and those of a debootstrap that was
  # stopped half-way (it mounts /proc in its target while it configures).
  unmount_under "$WORK"
  if mounted_under "$WORK"; then
    echo "fresh-machine-check: a mount under ${WORK} is left; not removing ${FS}" >&2
  else
    rm -rf "$FS"
  fi
  if ((status == 0)); then log "passed in $((SECONDS - started)) s"; else log "failed after $((SECONDS - started)) s"; fi
  exit "$status"
}

((EUID == 0)) || die "needs root (debootstrap, chroot)"
for tool in debootstrap git go mvn curl; do
  command -v "$tool" >/dev/null || die "needs ${tool}"
done
if [[ "${FRESH_MACHINE_COLD:-}" == 1 && -d "$CACHE" ]]; then
  unmount_under "$CACHE"
  mounted_under "$CACHE" && die "a mount under ${CACHE} is left; not emptying it"
  rm -rf "$CACHE"
fi
mkdir -p "$CACHE" "$WORK" "${CACHE}/apt-archives/partial"
# A signal ends the run as a failure: cleanup, on EXIT, reads the status.
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ------------------------------------------------------------ the root

tar="${CACHE}/bookworm-minbase-$(printf '%s' "$PACKAGES" | sha256sum | cut -c1-12).tar"
if [[ ! -s "$tar" ]]; then
  mirror="$("${ROOT}/scripts/debian-mirror.sh")"
  [[ -n "$mirror" ]] || die "no Debian bookworm mirror in /etc/apt/sources.list*"
  log "debootstrap --variant=minbase bookworm from ${mirror} (first run only): ${PACKAGES}"
  rm -rf "${WORK}/debootstrap.tmp"
  # --cache-dir: the .debs stay, so that a root lost from the cache is made
  # again without downloading them (apt in the root reuses the same ones).
  if ! nice -n 10 debootstrap --variant=minbase --include="$PACKAGES" --cache-dir="${CACHE}/apt-archives" \
      bookworm "${WORK}/debootstrap.tmp" "$mirror" \
      >"${CACHE}/debootstrap.log" 2>&1; then
    tail -n 30 "${CACHE}/debootstrap.log" >&2
    die "debootstrap failed (${CACHE}/debootstrap.log)"
  fi
  rm -rf "${WORK}/debootstrap.tmp"/var/cache/apt/archives/*.deb
  tar -C "${WORK}/debootstrap.tmp" --numeric-owner -cf "${tar}.tmp" .
  mv -f "${tar}.tmp" "$tar"
  rm -rf "${WORK}/debootstrap.tmp"
fi
log "a new root from ${tar}, the host's Go ($(go env GOVERSION)), a clone"
rm -rf "$FS"
mkdir -p "$FS"
tar -C "$FS" --numeric-owner -xf "$tar"
cp -a "$(go env GOROOT)" "${FS}/usr/local/go"
cp /etc/resolv.conf "${FS}/etc/resolv.conf"
# The machine's own CA certificates (its registries may be reached through
# a proxy that signs with one), installed so that an apt-get install of
# ca-certificates inside keeps them.
if compgen -G '/usr/local/share/ca-certificates/*.crt' >/dev/null; then
  cp /usr/local/share/ca-certificates/*.crt "${FS}/usr/local/share/ca-certificates/"
  chroot "$FS" update-ca-certificates >/dev/null
fi
chroot "$FS" useradd --create-home --shell /bin/bash dev
git clone -q --no-local "$ROOT" "${FS}/home/dev/payment-service"
chroot "$FS" chown -R dev:dev /home/dev/payment-service
git clone -q --no-local "$ROOT" "${FS}/root/payment-service"

mount -t proc proc "${FS}/proc"
mount --rbind /sys "${FS}/sys"
mount --rbind /dev "${FS}/dev"
# Caches that make a second run faster: Debian's .debs, root's Go caches.
for dir in root-go root-gocache; do mkdir -p "${CACHE}/${dir}"; done
mount --bind "${CACHE}/apt-archives" "${FS}/var/cache/apt/archives"
mkdir -p "${FS}/root/go" "${FS}/root/.cache/go-build"
mount --bind "${CACHE}/root-go" "${FS}/root/go"
mount --bind "${CACHE}/root-gocache" "${FS}/root/.cache/go-build"
# The host's Go module download cache, read-only, as the first GOPROXY.
host_modules="$(go env GOMODCACHE)/cache/download"
mkdir -p "$host_modules" "${FS}/mnt/host-go-modules"
mount --bind "$host_modules" "${FS}/mnt/host-go-modules"
mount -o remount,bind,ro "${FS}/mnt/host-go-modules"

maven_repository="$(cd "$WORK" && mvn -q -B help:evaluate -Dexpression='project.remoteArtifactRepositories[0].url' \
  -Doutput="${WORK}/maven-repository" >/dev/null 2>&1 && cat "${WORK}/maven-repository")" ||
  die "could not ask the host's Maven for its repository"
# The environment of a login on the fresh machine: nothing of the host's but
# where the registries are.
env_for() { # user home
  echo env -i "HOME=$2" "USER=$1" "PATH=/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
    "GOPROXY=file:///mnt/host-go-modules,$(go env GOPROXY)" "PGTEMP_MAVEN_REPOSITORY=${maven_repository}" LANG=C.UTF-8
}

# ------------------------------------------------------------ make dev

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
http_port="$(free_port)" kafka_port="$(free_port)" provider_port="$(free_port)"
log "as a normal user: make dev (HTTP on 127.0.0.1:${http_port}; the first run downloads modules and PostgreSQL)"
dev_log="${WORK}/make-dev.log"
# In a session of its own, as a terminal's foreground job would be: Ctrl-C
# is a SIGINT to that whole process group.
# shellcheck disable=SC2046 # env_for's words are meant to split
setsid chroot --userspec=dev:dev "$FS" $(env_for dev /home/dev) \
  "HTTP_ADDR=127.0.0.1:${http_port}" "DEV_KAFKA_PORT=${kafka_port}" "DEV_PROVIDER_PORT=${provider_port}" \
  bash -c 'cd ~/payment-service && exec make dev' >"$dev_log" 2>&1 &
dev_pid=$!
dev_pgid=$dev_pid
charge() {
  curl -s -o "${WORK}/charge.json" -w '%{http_code}' "http://127.0.0.1:${http_port}/payments" \
    -H 'Authorization: Bearer demo-secret' \
    -H 'Content-Type: application/json' \
    -H 'Idempotency-Key: order-1001-attempt' \
    -d '{"orderId":1001,"customerId":42,"amount":"100.50","currency":"RUB","paymentProvider":"sandbox","externalPaymentId":"pi_demo_1"}' || true
}
# The tour's first charge, until the seeded order is projected (the service
# answers 404 or 409 before that), for at most 15 minutes: a cold run builds
# the service and downloads its modules and PostgreSQL first.
status=""
deadline=$((SECONDS + 900))
while ((SECONDS < deadline)); do
  kill -0 "$dev_pid" 2>/dev/null || { tail -n 40 "$dev_log" >&2; die "make dev exited before serving the charge"; }
  status="$(charge)"
  [[ "$status" == 201 ]] && break
  sleep 2
done
[[ "$status" == 201 ]] || { tail -n 40 "$dev_log" >&2; die "the tour's first charge answered ${status:-nothing}, not 201"; }
log "the tour's first charge: 201 $(cat "${WORK}/charge.json")"
kill -INT -- "-${dev_pgid}"
deadline=$((SECONDS + 60))
while kill -0 "$dev_pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.5; done
kill -0 "$dev_pid" 2>/dev/null && { tail -n 40 "$dev_log" >&2; die "make dev still runs 60 s after Ctrl-C"; }
dev_status=0
wait "$dev_pid" || dev_status=$?
dev_pgid=""
((dev_status == 0)) || { tail -n 40 "$dev_log" >&2; die "make dev exited ${dev_status} after Ctrl-C, not 0"; }
leftover="$(ls -d "${FS}"/tmp/pgtemp-* 2>/dev/null || true)"
[[ -z "$leftover" ]] || die "make dev left PostgreSQL's files: ${leftover}"
log "make dev stopped on Ctrl-C: exit 0, its cluster removed"

# ------------------------------------------------------------ make test

log "as root: make test (installs Chromium and gcc from Debian's packages first)"
# shellcheck disable=SC2046
if ! timeout "$TEST_TIMEOUT" chroot "$FS" $(env_for root /root) bash -c 'cd ~/payment-service && make test' \
    >"${WORK}/make-test.log" 2>&1; then
  grep -E -- '^(--- FAIL|FAIL|panic:)' "${WORK}/make-test.log" | head -n 40 >&2 || true
  tail -n 40 "${WORK}/make-test.log" >&2
  die "make test failed as root in the fresh root (${WORK}/make-test.log)"
fi
# go test's closing lines, as CI reads them.
grep -E '^(ok|FAIL|---)' "${WORK}/make-test.log" || true
log "make test passed as root"
