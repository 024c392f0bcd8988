# shellcheck shell=bash
# Sourced by scripts that mount below a directory of their own (a chroot's
# /proc, /sys and /dev, a Docker daemon's overlays): deploy/compose-check/check.sh
# and scripts/fresh-machine-check.sh. Whatever ended the run, no mount of
# theirs may stay behind.

# unmount_under DIR: lazily unmounts every mount point below DIR, the
# deepest first (a mount inside another goes before it). Lazy, so that a
# process still holding a file there cannot keep the mount; each failure is
# ignored, and mounted_under tells what is left.
unmount_under() {
  local mnt
  for mnt in $(awk -v dir="${1%/}/" 'index($2, dir) == 1 {print $2}' /proc/self/mounts | sort -r); do
    umount -l "$mnt" 2>/dev/null || true
  done
}

# mounted_under DIR: succeeds when some mount point still lies below DIR
# (then removing DIR would reach into what is mounted there).
mounted_under() {
  awk -v dir="${1%/}/" 'index($2, dir) == 1 {found = 1} END {exit !found}' /proc/self/mounts
}
