"""Over SSH to the gpu-host kit's login node (paramiko, the host key it pinned; the machine may have no ssh
client): which sbatch/srun a login shell finds, and one `srun --gres=gpu:1` step on the compute node."""

import os

import paramiko

c = paramiko.SSHClient()
c.load_host_keys(os.environ.get("LOGIN_KNOWN_HOSTS", os.path.expanduser("~/.ssh/known_hosts")))
c.set_missing_host_key_policy(paramiko.RejectPolicy())
c.connect("127.0.0.1", int(os.environ.get("LOGIN_PORT", "2222")), "root",
          key_filename=os.environ.get("LOGIN_KEY", os.path.expanduser("~/.ssh/id_ed25519")), timeout=20)
step = ('echo node=$SLURMD_NODENAME job=$SLURM_JOB_ID CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES '
        'SLURM_JOB_GPUS=$SLURM_JOB_GPUS; nvidia-smi -L')
cmd = f'echo "login shell PATH=$PATH"; command -v sbatch srun; srun --gres=gpu:1 -N1 --immediate=30 sh -c \'{step}\''
_, out, err = c.exec_command(cmd, timeout=90)
print(out.read().decode().rstrip())
print(err.read().decode().rstrip())
print("exit", out.channel.recv_exit_status())
