#!/usr/bin/env bash
# Prints the Debian mirror this machine's apt uses for bookworm itself (not
# -updates, -security or a third party's repository), read at run time from
# its apt sources, so that no mirror's address is written in this repository.
# Used by deploy/compose-check/check.sh and scripts/fresh-machine-check.sh.
set -euo pipefail
for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
  [[ -f "$f" ]] || continue
  awk '
    /^deb[ \t]/ { line = $0; sub(/\[[^]]*\]/, "", line); split(line, f); if (f[3] == "bookworm") { print f[2]; exit } }
    /^URIs:/    { uri = $2 }
    /^Suites:/  { for (i = 2; i <= NF; i++) if ($i == "bookworm") { print uri; exit } }
    /^$/        { uri = "" }
  ' "$f"
done | head -n1
