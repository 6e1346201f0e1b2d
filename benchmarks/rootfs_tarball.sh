#!/usr/bin/env bash
# Time testhost/setup's own make_rootfs_tarball (the test host's base image rootfs), taken from one or more
# versions of that file, alternated, each into a cache dir of its own that is removed after (root, network):
#   git show REF:testhost/setup > /tmp/setup.old
#   benchmarks/rootfs_tarball.sh /tmp/setup.old testhost/setup testhost/setup /tmp/setup.old
# Prints each run's wall time, the load and the tarball's size. Keep one tarball with KEEP=DIR (the last run's).
set -euo pipefail
[ "$(id -u)" = 0 ] || { echo "run as root (mmdebstrap/debootstrap)" >&2; exit 2; }
run_one() {
  local file=$1 out=$2
  (
    # the definitions only: the variables it needs, log/die/now/since, and the functions that make the tarball
    eval "$(sed -n '/^SUITE=/p;/^BASE_PACKAGES=/p' "$file")"
    eval "$(sed -n '/^log() /,/^since() /p' "$file")"
    eval "$(sed -n '/^debian_mirror() {/,/^}/p;/^unmount_below() {/,/^}/p;/^make_rootfs_tarball() {/,/^}/p' "$file")"
    # shellcheck disable=SC2034  # read by the make_rootfs_tarball evaluated above
    CACHE=$(dirname "$out")
    t0=$(now)
    make_rootfs_tarball "$out" 2>/dev/null
    echo "$file: $(since "$t0") s, load $(cut -d' ' -f1 /proc/loadavg), $(du -m "$out" | cut -f1) MB"
  )
}
for file in "$@"; do
  dir=$(mktemp -d /var/tmp/rootfs-bench.XXXXXX)
  run_one "$file" "$dir/base.tar"
  if [ -n "${KEEP:-}" ]; then mkdir -p "$KEEP" && mv "$dir/base.tar" "$KEEP/"; fi
  rm -rf --one-file-system "$dir"
done
