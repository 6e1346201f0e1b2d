#!/usr/bin/env bash
# A devenv container environment on a real GPU: podman + CDI on the H200 machine, reached over SSH as a user's
# laptop would reach a GPU box. The device tool runs this from the repo root with .gpuhost (prepared with
# GPUHOST_WITH_DEPS="jupyter-server ipykernel"), .gpucontainers and .gpupodman (Debian's slirp4netns, libslirp.so.0 and
# /usr/lib/podman/rootlessport) carried:
#   ../shared/gpu-host/prepare; ../shared/gpu-containers/prepare; (see docs/gpu-proof/README.md for .gpupodman)
# The machine has no registry and no network, so the image is made there: the machine's own root (its CUDA
# PyTorch) plus devenv's runtime files, `podman import`ed with devenv's labels. devenv then does the rest:
# check (engine, CDI spec, driver vs the image's CUDA), up (podman's API through `podman system dial-stdio`,
# GPUs as CDI devices), a kernel through devenv's tunnel, sanity inside the container, monitor, down.
set -uo pipefail
OUT=${OUT:-/tmp/podman-proof}; mkdir -p "$OUT"   # written as it goes: a run cut short still leaves its log
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"   # step, say, run, devenv, work_in, start_gpuhost, torch_python, host_profile

step "start: SSH GPU host (dropbear), podman + CDI spec, slirp4netns for published ports"
start_gpuhost "$OUT/start.log"
bash .gpucontainers/start >>"$OUT/start.log" 2>&1 || { cat "$OUT/start.log"; exit 1; }
cp .gpupodman/slirp4netns /tmp/.pod/bin/ && cp .gpupodman/libslirp.so.0 /tmp/.pod/lib/
# No CNI plugins here: containers get their own network namespace through slirp4netns, which also publishes
# their ports on the host's 127.0.0.1 (what devenv asks for).
mkdir -p /etc/containers/containers.conf.d
# the kit's /etc/containers comes from the machine that prepared it: drop that test host's own settings
rm -f /etc/containers/containers.conf.d/50-devenv-testhost.conf
printf '[containers]\nnetns = "slirp4netns"\n' > /etc/containers/containers.conf.d/90-devenv-proof.conf
mkdir -p /usr/libexec/podman && cp /tmp/.pod/bin/catatonit /usr/libexec/podman/catatonit   # where podman's API looks
cp .gpupodman/rootlessport /usr/libexec/podman/rootlessport   # publishes slirp4netns ports on the host
pkill -f "podman system service" ; sleep 0.5
export PATH=/tmp/.pod/bin:$PATH LD_LIBRARY_PATH=/tmp/.pod/lib
(setsid podman system service -t 0 unix:///run/podman/podman.sock </dev/null >/tmp/podman-service.log 2>&1 &)
for _ in $(seq 50); do [ -S /run/podman/podman.sock ] && break; sleep 0.1; done
# SSH sessions (dropbear) start with a plain PATH: podman must be found there as on any podman host.
printf '#!/bin/sh\nLD_LIBRARY_PATH=/tmp/.pod/lib PATH=/tmp/.pod/bin:$PATH exec /tmp/.pod/bin/podman "$@"\n' > /usr/local/bin/podman
chmod +x /usr/local/bin/podman
unset LD_LIBRARY_PATH; export PATH=${PATH#/tmp/.pod/bin:}   # from here on, `podman` is the wrapper, as over SSH
cat /etc/cdi/nvidia.yaml | head -n 20 >"$OUT/cdi-spec-head.yaml"
TORCH_PY=$(torch_python)
run nvidia-smi -L; run podman --version

step "image: the machine's CUDA PyTorch + jupyter-server + devenv's runtime files, podman import"
# devenv's runtime files go straight into this throwaway machine's root, which becomes the image's one layer
"$TORCH_PY" -m pip install -q --no-index --find-links .gpuhost/whl --target /opt/devenv-site \
  jupyter-server ipykernel >"$OUT/pip.log" 2>&1 || tail -n 5 "$OUT/pip.log"
mkdir -p /etc/jupyter /etc/devenv /workspace
install -m 0755 images/entrypoint.sh /usr/local/bin/devenv-entrypoint; install -m 0755 images/ready.py /usr/local/bin/devenv-ready
cp images/jupyter_server_config.py /etc/jupyter/; cp images/profile_devenv.sh /etc/profile.d/00-devenv.sh
ln -sfn /opt/torch/.venv /opt/venv   # devenv-ready's interpreter
torch_version=$("$TORCH_PY" -c 'import torch; print(torch.__version__)')
cuda_version=$("$TORCH_PY" -c 'import torch; print(torch.version.cuda)')
pybase=$(readlink -f "$TORCH_PY"); pyroot=$(dirname "$(dirname "$pybase")")
roots=(usr etc bin sbin lib lib64 opt/torch opt/devenv-site opt/venv workspace)
case "$pyroot" in /usr|/usr/*|/opt/torch*) ;; *) roots+=("${pyroot#/}") ;; esac
echo "torch $torch_version (CUDA $cuda_version), python $pybase; image roots: ${roots[*]}" | tee -a "$OUT/proof.log"
du -xsm /usr/* /usr/lib/* /opt/torch 2>/dev/null | sort -n | tail -n 12 >"$OUT/sizes.txt"
t0=$(date +%s)
podman image exists localhost/devenv/h200:local || \
tar -C / --ignore-failed-read --exclude=usr/local/cuda\* --exclude=usr/share/doc --exclude=usr/share/man \
    --exclude=usr/share/locale --exclude=usr/share/info --exclude=usr/include --exclude=usr/src \
    --exclude=usr/lib/modules --exclude=usr/lib/firmware --exclude='usr/lib/x86_64-linux-gnu/*.a' \
    --exclude=usr/local/bin/podman -cf - "${roots[@]}" 2>"$OUT/tar.err" \
  | podman import --change 'ENTRYPOINT ["/usr/local/bin/devenv-entrypoint"]' --change 'WORKDIR /workspace' \
      --change 'ENV PATH=/opt/torch/.venv/bin:/opt/devenv-site/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
      --change 'ENV PYTHONPATH=/opt/devenv-site' --change 'ENV VIRTUAL_ENV=/opt/torch/.venv' --change 'ENV LANG=C.UTF-8' \
      --change "LABEL org.devenv.image=pytorch org.devenv.cuda=$cuda_version org.devenv.torch=$torch_version" \
      - localhost/devenv/h200:local >"$OUT/import.log" 2>&1
echo "import exit=$? in $(( $(date +%s) - t0 )) s" | tee -a "$OUT/proof.log"; tail -n 3 "$OUT/tar.err"
run podman images

export DEVENV_HOME=/tmp/devenv-home; mkdir -p "$DEVENV_HOME/profiles/hosts" "$DEVENV_HOME/profiles/envs"
cat >"$DEVENV_HOME/profiles/hosts/gpu-host.yaml" <<YAML
description: The H200 machine over SSH (dropbear on 127.0.0.1:2222), podman with a CDI spec, no Docker
ssh:
  alias: gpu-host
runtime: docker
engine: podman
default_env: h200
YAML
cat >"$DEVENV_HOME/profiles/envs/h200.yaml" <<YAML
description: The machine's own CUDA PyTorch in a podman container, GPUs through CDI
image: localhost/devenv/h200:local
cuda: "$cuda_version"
torch: "$torch_version"
image_size_gb: 12
ports: {jupyter: 8888}
volumes: {workspace: /workspace}
shm_size: 8g
gpus: all
sshd: false
YAML

step "devenv check gpu-host (podman host, CDI)"
run devenv check gpu-host; echo "exit=$?" | tee -a "$OUT/proof.log"
devenv check gpu-host --json >"$OUT/check.json" 2>/dev/null

step "devenv up gpu-host: a podman container with the GPU"
t0=$(date +%s)
devenv up gpu-host --detach --json >"$OUT/up.json" 2>"$OUT/up.err"; code=$?
echo "up exit=$code in $(( $(date +%s) - t0 )) s" | tee -a "$OUT/proof.log"; tail -n 15 "$OUT/up.err" | tee -a "$OUT/proof.log"
run podman ps --format '{{.Names}} {{.Status}} {{.Ports}}'
run devenv exec gpu-host -- nvidia-smi -L
run devenv exec gpu-host -- mkdir -p -m 1777 /tmp   # the imported root has no /tmp (it was left out of the tar)

step "a Jupyter kernel in the container, through devenv's tunnel"
python3 benchmarks/gpu/kernel_through_tunnel.py gpu-host 2>&1 | tee -a "$OUT/proof.log"; echo "kernel exit=${PIPESTATUS[0]}" | tee -a "$OUT/proof.log"

step "devenv sanity gpu-host --suite quick (inside the container)"
devenv sanity gpu-host --suite quick >"$OUT/sanity-quick.txt" 2>&1; echo "sanity exit=$?" | tee -a "$OUT/proof.log"
tail -n 40 "$OUT/sanity-quick.txt" | tee -a "$OUT/proof.log"

step "devenv monitor gpu-host --once --json while the container trains"
devenv exec gpu-host -- python3 -c '
import time, torch
x = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
end = time.time() + 20
while time.time() < end:
    y = x @ x
torch.cuda.synchronize()' >"$OUT/load.log" 2>&1 &
load=$!
sleep 8
devenv monitor gpu-host --once --json >"$OUT/monitor.json" 2>&1; echo "monitor exit=$?" | tee -a "$OUT/proof.log"
devenv monitor gpu-host --once 2>&1 | tee -a "$OUT/proof.log"
wait $load

step "devenv down gpu-host"
run devenv down gpu-host --yes; echo "down exit=$?" | tee -a "$OUT/proof.log"
run podman ps -a --format '{{.Names}} {{.Status}}'
grep -h "^=== \|exit=" "$OUT/proof.log"
