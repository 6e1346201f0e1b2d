# shellcheck shell=bash
# What every GPU proof script here starts with, sourced by each (`. "$(dirname "${BASH_SOURCE[0]}")/common.sh"`):
# the proof log's helpers, the gpu-host kit's start (../shared/gpu-host: dropbear on 127.0.0.1:2222, ssh alias
# gpu-host, host key pinned), devenv from this checkout, the machine's torch python, and a host profile for the
# bare-host runtime. The scripts run by the device tool from the repo root (`bash benchmarks/gpu/NAME.sh`), with
# .gpuhost carried; OUT (where proof.log goes) is set by the script before it calls any of these.

# a heading in the log, with the time
step() { printf '\n=== %s (%s)\n' "$*" "$(date -u +%T)" | tee -a "$OUT/proof.log"; }
# a line in the log
say() { echo "$*" | tee -a "$OUT/proof.log"; }
# a command and its output in the log; its own exit code
run() { echo "+ $*" | tee -a "$OUT/proof.log"; "$@" 2>&1 | tee -a "$OUT/proof.log"; return "${PIPESTATUS[0]}"; }
# devenv from this checkout (PYTHONPATH, set by start_gpuhost)
devenv() { python3 -m devenv "$@"; }

# work_in NAME [TARBALL]: the outputs gather in /tmp/NAME, made afresh (OUT from here on); at the script's exit
# its proof.log and TARBALL (default NAME.tar.gz: the whole folder) go to the OUT it was given (default
# /tmp/NAME-out), where the device tool brings them back
work_in() {
  FINAL=${OUT:-/tmp/$1-out}; mkdir -p "$FINAL"
  OUT=/tmp/$1; rm -rf "$OUT"; mkdir -p "$OUT"
  # shellcheck disable=SC2064  # NAME and TARBALL are fixed now; OUT and FINAL are globals by then anyway
  trap "cp \"\$OUT/proof.log\" \"\$FINAL/\" 2>/dev/null; tar -C /tmp -czf \"\$FINAL/${2:-$1.tar.gz}\" $1" EXIT
}

# start_gpuhost LOG: the gpu-host kit started (its output in LOG; a kit that fails shows LOG's end and ends the
# script), and devenv with the kit's libraries (/tmp/site) on PYTHONPATH
start_gpuhost() {
  if ! bash .gpuhost/start >"$1" 2>&1; then
    say "the gpu-host kit did not start ($1):"; tail -n 40 "$1" | tee -a "$OUT/proof.log"; exit 1
  fi
  export PYTHONPATH=/tmp/site:$PWD
}

# the machine's CUDA torch python (/opt/torch/.venv), else python3
torch_python() {
  if [ -x /opt/torch/.venv/bin/python3 ]; then echo /opt/torch/.venv/bin/python3; else command -v python3; fi
}

# host_profile NAME PYTHON DEFAULT_ENV: $DEVENV_HOME/profiles/hosts/NAME.yaml, the bare-host runtime (no Docker)
# with PYTHON, reached over the ssh alias NAME (gpu-host: the kit's)
host_profile() {
  mkdir -p "$DEVENV_HOME/profiles/hosts"
  printf 'description: the H200 machine over SSH (dropbear on 127.0.0.1:2222), no Docker\nssh:\n  alias: %s\nruntime: host\npython: %s\ndefault_env: %s\n' \
    "$1" "$2" "$3" >"$DEVENV_HOME/profiles/hosts/$1.yaml"
}
