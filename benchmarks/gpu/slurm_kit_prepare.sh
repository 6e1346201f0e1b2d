#!/usr/bin/env bash
# Build what the H200 machine needs for slurm_gpu_proof.sh, in the checkout the device tool sends (the lead's,
# default /work/main; SLURMKIT_CHECKOUT=... for another), both folders git-ignored there:
#   .gpuhost/   the gpu-host kit (../shared/gpu-host/prepare) with JupyterLab + ipykernel for `devenv up`, minus
#               the wheels the machine's python already holds (KINDS.md's package list): the full kit is 56 MB
#               and at most 64 MiB travel in all
#   .slurmkit/  Debian 12 .debs of slurmctld, slurmd, slurm-client, the plugins (gres/gpu), munge, and the libraries
#               they load that an Ubuntu image may lack (start copies none that is already there);
#               slurm_kit_start.sh as start, the proof script, the kernel client, and overlay.tar.gz: this
#               branch's devenv/ and tests/jupyter_client.py, unpacked over the device's copy of the checkout.
# Run here, from this branch's worktree:  bash benchmarks/gpu/slurm_kit_prepare.sh
set -euo pipefail
branch=$(git rev-parse --show-toplevel)
dest_root=${SLURMKIT_CHECKOUT:-/work/main}
kit=$dest_root/.slurmkit
exclude=$(git -C "$dest_root" rev-parse --git-path info/exclude)
case "$exclude" in /*) ;; *) exclude=$dest_root/$exclude ;; esac
mkdir -p "$(dirname "$exclude")"
grep -qxF '/.slurmkit/' "$exclude" 2>/dev/null || echo '/.slurmkit/' >>"$exclude"

if [ "${SLURMKIT_SKIP_GPUHOST:-0}" != 1 ]; then
  # shared/ sits beside the lead's checkout (/work/main -> /work/shared), two up from a worktree (/work/wt/NAME)
  prepare=""
  for p in "$branch/../shared/gpu-host/prepare" "$branch/../../shared/gpu-host/prepare"; do
    [ -x "$p" ] && { prepare=$p; break; }
  done
  [ -n "$prepare" ] || { echo "no shared/gpu-host/prepare beside $branch" >&2; exit 1; }
  (cd "$dest_root" && GPUHOST_WITH_DEPS="jupyterlab ipykernel" "$prepare")
fi
# already on the H200 machine's python (its image's package list), newer or equal: leave them out
for n in anyio attrs certifi charset_normalizer h11 httpcore httpx idna jinja2 markdown_it_py markupsafe mdurl \
         packaging psutil pygments python_dateutil pyyaml requests six typing_extensions urllib3 prometheus_client; do
  rm -f "$dest_root"/.gpuhost/whl/"$n"-[0-9]*.whl
done

rm -rf "$kit"; mkdir -p "$kit/deb"
pkgs=(slurmctld slurmd slurm-client slurm-wlm-basic-plugins munge libmunge2
      libhwloc15 libjson-c5 liblua5.1-0 libnuma1 libyaml-0-2 liblz4-1 libreadline8 libgcrypt20 libgpg-error0 libdbus-1-3)
(cd "$kit/deb" && apt-get download "${pkgs[@]}" >/dev/null 2>&1) || {
  apt-get update -qq >/dev/null 2>&1; (cd "$kit/deb" && apt-get download "${pkgs[@]}" >/dev/null); }
cp "$branch/benchmarks/gpu/slurm_kit_start.sh" "$kit/start"
cp "$branch/benchmarks/gpu/slurm_gpu_proof.sh" "$kit/proof.sh"
cp "$branch/benchmarks/gpu/common.sh" "$kit/common.sh"   # proof.sh sources it from its own folder
cp "$branch/benchmarks/gpu/slurm_kernel_through_relay.py" "$branch/benchmarks/gpu/slurm_login_srun.py" "$kit/"
(cd "$branch" && git log -1 --format='%h %s' >OVERLAY_COMMIT && \
  tar --exclude=__pycache__ -czf "$kit/overlay.tar.gz" devenv tests/jupyter_client.py OVERLAY_COMMIT && rm -f OVERLAY_COMMIT)
du -sh "$kit" "$dest_root/.gpuhost"
total=$(( $(git -C "$dest_root" ls-files -z | xargs -0 du -cb | tail -n 1 | cut -f1) + $(du -sb "$kit" | cut -f1) + $(du -sb "$dest_root/.gpuhost" | cut -f1) ))
echo "travels: $((total / 1048576)) MiB of 64 (tracked files + .slurmkit + .gpuhost)"
[ "$total" -lt $((64 * 1048576)) ] || { echo "too large for the device tool" >&2; exit 1; }
