#!/usr/bin/env bash
# Start a one-node Slurm cluster with gres/gpu from the Debian 12 .debs in .slurmkit/deb (slurm_kit_prepare.sh):
# munged, slurmctld and one slurmd ("gpunode", NodeHostname=localhost) whose GPUs are the /dev/nvidiaN files.
#
#   SLURMKIT_ROOT=/ (default; the H200 machine, root): the packages' files are copied into / without replacing
#     any file already there (tar --skip-old-files), so Slurm's compiled-in paths hold (/etc/slurm/slurm.conf,
#     the plugin dir, /run/munge) and every shell, an SSH session's too, finds sbatch/srun on its PATH.
#   SLURMKIT_ROOT=<dir> (a test here, beside another Slurm): everything stays under <dir>; own munge socket,
#     own ports, SLURM_CONF and the plugin dir pointed there. Nothing outside <dir> is touched.
# Other knobs: SLURMKIT_PORT (slurmctld; slurmd takes the next one), SLURMKIT_GPU_FILES (default: /dev/nvidia[0-9]*),
# SLURMKIT_GPU_TYPE (default h200). Prints `export ...` lines for the scratch mode on stdout's last lines.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
ROOT=${SLURMKIT_ROOT:-/}
PORT=${SLURMKIT_PORT:-6817}
GPU_TYPE=${SLURMKIT_GPU_TYPE:-h200}
log() { printf '[slurmkit] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

stage=$(mktemp -d /tmp/slurmkit-stage.XXXXXX)
for f in "$here"/deb/*.deb; do dpkg -x "$f" "$stage"; done
if [ "$ROOT" = / ]; then
  # no file already there is replaced: the OS's own (newer) libraries stay, only the missing ones are added
  tar -C "$stage" -cf - . | tar -C / -xf - --skip-old-files --keep-directory-symlink
  ldconfig
  P=""; CONF=/etc/slurm/slurm.conf; D=/var/lib/slurmkit; SOCK=/run/munge/munge.socket.2
  MUNGE_DIRS="/etc/munge /var/lib/munge /var/log/munge /run/munge"
else
  mkdir -p "$ROOT"; ROOT=$(cd "$ROOT" && pwd)
  cp -a "$stage"/. "$ROOT"/
  P=$ROOT; CONF=$ROOT/etc/slurm/slurm.conf; D=$ROOT/var/lib/slurmkit; SOCK=$ROOT/run/munge/munge.socket.2
  MUNGE_DIRS="$ROOT/etc/munge $ROOT/var/lib/munge $ROOT/var/log/munge $ROOT/run/munge"
  export LD_LIBRARY_PATH=$ROOT/usr/lib/x86_64-linux-gnu:$ROOT/usr/lib/x86_64-linux-gnu/slurm-wlm${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export SLURM_CONF=$CONF
fi
rm -rf "$stage"
LIBDIR=$P/usr/lib/x86_64-linux-gnu
# Debian names the daemons *-wlm and links them through update-alternatives (a postinst that dpkg -x skips)
for d in slurmctld slurmd slurmstepd; do [ -e "$P/usr/sbin/$d" ] || ln -s "$d-wlm" "$P/usr/sbin/$d"; done
PLUGINS=$LIBDIR/slurm-wlm
for b in "$P/usr/sbin/munged" "$P/usr/sbin/slurmctld" "$P/usr/sbin/slurmd" "$P/usr/sbin/slurmstepd" "$P/usr/bin/sbatch"; do
  [ -x "$b" ] || die "$b is missing from the kit"
  missing=$(ldd "$b" 2>&1 | grep 'not found' || true)
  [ -z "$missing" ] || die "$b cannot load: $missing"
done

# --- munge: a fresh key, munged as root (the only user here) -------------------------------------------------
mkdir -p $MUNGE_DIRS; chmod 0700 "$P/etc/munge" "$P/var/lib/munge"; chmod 0755 "$P/run/munge"
dd if=/dev/urandom of="$P/etc/munge/munge.key" bs=1024 count=1 status=none; chmod 0400 "$P/etc/munge/munge.key"
"$P/usr/sbin/munged" --force --socket="$SOCK" --key-file="$P/etc/munge/munge.key" \
  --pid-file="$P/run/munge/munged.pid" --log-file="$P/var/log/munge/munged.log" \
  --seed-file="$P/var/lib/munge/munged.seed" </dev/null || die "munged did not start: $(tail -n 3 "$P/var/log/munge/munged.log" 2>/dev/null)"
for _ in $(seq 50); do "$P/usr/bin/munge" -S "$SOCK" -n 2>/dev/null | "$P/usr/bin/unmunge" -S "$SOCK" >/dev/null 2>&1 && break; sleep 0.1; done
"$P/usr/bin/munge" -S "$SOCK" -n | "$P/usr/bin/unmunge" -S "$SOCK" >/dev/null || die "munged does not answer"
log "munged answers on $SOCK"

# --- slurm.conf + gres.conf: one node, its GPUs as gres/gpu ---------------------------------------------------
gpu_files=${SLURMKIT_GPU_FILES:-$(ls -1 /dev/nvidia[0-9]* 2>/dev/null | sort -V | tr '\n' ' ')}
[ -n "${gpu_files// /}" ] || die "no GPU device file (/dev/nvidia0 ...); set SLURMKIT_GPU_FILES"
ngpu=$(wc -w <<<"$gpu_files")
cpus=$(nproc)
mem=$(awk '/^MemTotal:/ { printf "%d", $2 / 1024 / 2 }' /proc/meminfo)   # half: MemTotal can grow later, never shrink below
mkdir -p "$(dirname "$CONF")" "$D/ctld" "$D/spool" "$D/log"
extra=""
[ -z "$P" ] || extra="PluginDir=$PLUGINS
AuthInfo=socket=$SOCK"
cat >"$CONF" <<EOF
# one-node Slurm with gres/gpu (written by slurm_kit_start.sh)
ClusterName=h200
SlurmctldHost=localhost
SlurmctldPort=$PORT
SlurmUser=root
AuthType=auth/munge
CredType=cred/munge
$extra
StateSaveLocation=$D/ctld
SlurmdSpoolDir=$D/spool
SlurmctldPidFile=$D/slurmctld.pid
SlurmdPidFile=$D/slurmd.pid
SlurmctldLogFile=$D/log/slurmctld.log
SlurmdLogFile=$D/log/slurmd.log
SlurmdDebug=verbose
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
MpiDefault=none
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
GresTypes=gpu
SlurmdTimeout=60
ReturnToService=2
KillWait=5
MinJobAge=300
EnforcePartLimits=ALL
NodeName=gpunode NodeHostname=localhost NodeAddr=127.0.0.1 Port=$((PORT + 1)) CPUs=$cpus RealMemory=$mem Gres=gpu:$GPU_TYPE:$ngpu State=UNKNOWN
PartitionName=gpu Nodes=gpunode Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
EOF
: >"$(dirname "$CONF")/gres.conf"
for f in $gpu_files; do echo "NodeName=gpunode Name=gpu Type=$GPU_TYPE File=$f" >>"$(dirname "$CONF")/gres.conf"; done
log "slurm.conf: $CONF ($cpus CPUs, ${mem} MB, gres gpu:$GPU_TYPE:$ngpu = $gpu_files)"

# --- daemons ----------------------------------------------------------------------------------------------------
"$P/usr/sbin/slurmctld" -f "$CONF" </dev/null || die "slurmctld did not start: $(tail -n 5 "$D/log/slurmctld.log")"
# slurmd 22.05 always loads a cgroup plugin; autodetect picks cgroup/v2 on a cgroup2 /sys/fs/cgroup, whose init
# needs systemd's dbus to make the stepds' scope (seen on the H200 machine: "cannot connect to dbus system daemon",
# slurmd exits). proctrack/linuxproc and task/none use no cgroup, so try in turn: cgroup/v1 (its init mounts
# nothing), cgroup/v2 making the scope itself (IgnoreSystemd=yes), then autodetect (no cgroup.conf).
start_slurmd() { "$P/usr/sbin/slurmd" -f "$CONF" -N gpunode -d "$P/usr/sbin/slurmstepd" </dev/null; }
node_up() {   # until the node is idle (at most $1 s)
  local i state
  for i in $(seq "$1"); do
    state=$("$P/usr/bin/sinfo" -h -N -o '%t' 2>/dev/null | head -n 1 || true)
    case "$state" in idle|mix|alloc) return 0 ;; esac
    "$P/usr/bin/scontrol" update NodeName=gpunode State=RESUME >/dev/null 2>&1 || true
    sleep 1
  done
  log "node gpunode not up after $1 s (state '$state')"; return 1
}
stop_slurmd() { local pid; pid=$(cat "$D/slurmd.pid" 2>/dev/null) && kill "$pid" 2>/dev/null; sleep 1; }
cgconf=$(dirname "$CONF")/cgroup.conf
started=""
for cg in "CgroupPlugin=cgroup/v1" "CgroupPlugin=cgroup/v2
IgnoreSystemd=yes" ""; do
  name=${cg:-autodetect}; name=${name//$'\n'/ }
  if [ -n "$cg" ]; then printf '%s\n' "$cg" >"$cgconf"; else rm -f "$cgconf"; fi
  if ! start_slurmd; then
    log "slurmd did not start with cgroup.conf '$name': $(tail -n 2 "$D/log/slurmd.log" | tr '\n' ' ')"; continue
  fi
  # a step must run too (slurmstepd loads the same cgroup plugin)
  if node_up 40 && out=$(timeout 40 "$P/usr/bin/srun" -N1 --gres=gpu:1 --immediate=20 sh -c 'echo "step ok on $SLURMD_NODENAME, CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES"' 2>&1); then
    log "$out"; started=$name; break
  fi
  log "with cgroup.conf '$name' a step did not run: ${out:-} $(tail -n 2 "$D/log/slurmd.log" | tr '\n' ' ')"
  stop_slurmd
done
[ -n "$started" ] || die "slurmd did not run a step with any cgroup.conf: $(tail -n 5 "$D/log/slurmd.log")"
log "slurmd runs (cgroup.conf: $started); node gpunode: $("$P/usr/bin/sinfo" -h -o '%P %a %D %t %G')"
if [ -n "$P" ]; then echo "export SLURM_CONF=$CONF LD_LIBRARY_PATH=$LD_LIBRARY_PATH PATH=$P/usr/bin:\$PATH"; fi
