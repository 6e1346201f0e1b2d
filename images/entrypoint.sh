#!/bin/sh
# devenv environment: sshd in the background, supervised (restarted when it dies, as Docker's restart policy
# restarts Jupyter with the container), JupyterLab in front (docker's --init reaps and forwards signals).
# Services listen on the container's own interface: Docker's published ports reach a container by its bridge
# address (DNAT), never its loopback; the host publishes them on its 127.0.0.1 only. Secrets arrive as files
# (put by devenv before the first start), never as arguments.
#   DEVENV_SSHD=0 / DEVENV_JUPYTER=0 turn a service off.
set -eu

if [ "${DEVENV_SSHD:-1}" = 1 ]; then
    # A host key of its own per container (kept across restarts); devenv pins it in its known_hosts.
    ssh-keygen -A >/dev/null
    if [ ! -s /etc/devenv/authorized_keys ]; then
        echo "devenv: /etc/devenv/authorized_keys is missing: sshd would let nobody in" >&2
        exit 1
    fi
    # Commands run over ssh (`devenv exec` with stdin or -t) see the environment's DEVENV_* settings, as
    # `docker exec` does. sshd takes its first SetEnv line only, so the whole line is written anew each start.
    extra=$(env | grep -E '^DEVENV_[A-Z0-9_]+=[A-Za-z0-9._:/@+-]*$' | sort | tr '\n' ' ' || true)
    sed -i "s|^SetEnv .*|SetEnv PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
VIRTUAL_ENV=/opt/venv ${extra}|" /etc/ssh/sshd_config.d/00-devenv.conf
    mkdir -p /run/sshd
    /usr/sbin/sshd -t   # a broken config fails the start, loudly, instead of a restart loop
    (
        while :; do
            /usr/sbin/sshd -D -e || true
            echo "devenv: sshd exited; restarting it" >&2
            sleep 1
        done
    ) &
fi

if [ "${DEVENV_JUPYTER:-1}" = 1 ]; then
    # jupyter_server_config.py reads the token from /etc/devenv/jupyter_token and refuses to run without it.
    if command -v jupyter-lab >/dev/null 2>&1; then
        exec jupyter lab
    fi
    exec jupyter server   # an image with jupyter-server only (no JupyterLab UI): the same kernels and API
fi
exec sleep infinity
