#!/usr/bin/env bash
# The Debian packages that Go cannot bring, in one list shared by `make test`
# and .ci/run, so that the two cannot drift. Everything else the
# tests need comes by itself: PostgreSQL's binaries are downloaded by
# internal/pgtemp (docs/decisions/0023-postgresql-binaries.md), deploy/'s
# Prometheus config and rules are checked with Prometheus's Go packages
# (deploy/promcheck_test.go; no promtool), the Kafka broker runs in-process.
#
#   scripts/install-test-packages.sh       what `make test` needs
#   scripts/install-test-packages.sh ci    that, and what .ci/run's other checks need
#   scripts/install-test-packages.sh failover  what make test-failover needs
#
# As root, the missing packages are installed with apt-get. As a normal user
# with some missing, it prints the one apt line to run and fails, so that
# `make test` stops before any test runs instead of failing half-way.
set -euo pipefail

# "command package why", one a line: the package is missing when the
# command is not on PATH.
make_test='
chromium  chromium  the /docs page is tested in a real browser (internal/http/docs_browser_test.go)
gcc       gcc       go test -race needs cgo, and cgo a C compiler
'
# .ci/run only. postgresql: CI keeps running the installed binaries that
# pgtemp prefers (the fault suite and the benchmarks as before); the
# downloaded ones are tested there all the same (TestDownloadedBinariesRunACluster).
ci='
initdb          postgresql      the server binaries pgtemp prefers, and pgbench
docker-compose  docker-compose  validates docker-compose.yml, and runs it (make compose-check)
dockerd         docker.io       make compose-check: a Docker daemon of its own
debootstrap     debootstrap     make compose-check and make fresh-machine-check: Debian root file systems
jq              jq              make compose-check reads the API'"'"'s answers
spin            spin            model-check the idempotency protocol (make model)
'

# make test-failover only (scripts/pg-ha-local.sh): Patroni itself comes
# from PyPI, Debian's being older than the version floor.
failover='
initdb     postgresql    the members: the server binaries, pg_rewind and pg_basebackup
etcd       etcd-server   the consensus store of Patroni
haproxy    haproxy       routes to the member whose Patroni says primary
'

case "${1:-}" in
"") wanted="$make_test" ;;
ci) wanted="$make_test$ci" ;;
failover) wanted="$make_test$failover" ;;
*) echo "usage: $0 [ci|failover]" >&2; exit 2 ;;
esac

# initdb is not on PATH where Debian's postgresql is installed; the browser
# test takes a browser elsewhere from $CHROMIUM.
has() {
  command -v "$1" >/dev/null 2>&1 && return 0
  case "$1" in
  initdb) compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null ;;
  chromium) [[ -n "${CHROMIUM:-}" ]] ;;
  *) return 1 ;;
  esac
}

missing=()
while read -r command package _; do
  [[ -n "$command" ]] || continue
  has "$command" || missing+=("$package")
done <<<"$wanted"
((${#missing[@]} == 0)) && exit 0

if ((EUID != 0)); then
  {
    echo "make test needs Debian packages that are not installed: ${missing[*]}"
    echo "install them (as root), then run make test again:"
    echo
    echo "    apt-get install ${missing[*]}"
    echo
  } >&2
  exit 1
fi
echo "installing from Debian's packages: ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q "${missing[@]}"
