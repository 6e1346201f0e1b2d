#!/bin/sh
# devenv environment: sshd in the background, supervised (restarted when it dies, as Docker's restart policy
# restarts Jupyter with the container), JupyterLab in front (docker's --init reaps and forwards signals).
# Services listen on the container's own interface: Docker's published ports reach a container by its bridge
# address (DNAT), never its loopback; the host publishes them on its 127.0.0.1 only. Secrets arrive as files
# (put by devenv before the first start), never as arguments.
#   DEVENV_SSHD=0 / DEVENV_JUPYTER=0 turn a service off.
#   DEVENV_USER: the environment's user (root by default): sshd admits only that user, Jupyter runs as it.
set -eu

user=${DEVENV_USER:-root}
if [ "$user" != root ]; then
    if ! id "$user" >/dev/null 2>&1; then
        echo "devenv: the environment's user $user does not exist in the image" >&2
        exit 1
    fi
    # The volumes' mount points (a fresh volume's is root's; a workspace made before by root) become the
    # user's: only their top folders, never recursively.
    old_ifs=$IFS
    IFS=:
    for dir in ${DEVENV_USER_DIRS:-${DEVENV_WORKSPACE:-/workspace}}; do
        if [ -d "$dir" ] && [ "$(stat -c %U "$dir")" = root ]; then chown "$user" "$dir" || true; fi
    done
    IFS=$old_ifs
fi

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
    # ... and the environment's own variables (the profile's env:, a devcontainer's containerEnv/remoteEnv), so
    # ssh, exec with stdin, login shells and VS Code see them as `docker exec` does; a value SetEnv cannot carry
    # (quotes, backslashes, line breaks...) is named here and left out, never half-written.
    for name in ${DEVENV_ENV_VARS:-}; do
        case "$name" in ''|[0-9]*|*[!A-Za-z0-9_]*|DEVENV_*) continue ;; esac
        value=$(printenv "$name") || continue
        case "$value" in
            *[!A-Za-z0-9\ ._:/@+=,%-]*)
                echo "devenv: $name is not given to ssh sessions (its value has characters sshd's SetEnv cannot carry)" >&2
                continue ;;
        esac
        extra="$extra \"$name=$value\""
    done
    permit=prohibit-password
    [ "$user" = root ] || permit=no
    sed -i -e "s|^AllowUsers .*|AllowUsers $user|" -e "s|^PermitRootLogin .*|PermitRootLogin $permit|" \
        /etc/ssh/sshd_config.d/00-devenv.conf
    sed -i "s|^SetEnv .*|SetEnv PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
VIRTUAL_ENV=/opt/venv ${extra}|" /etc/ssh/sshd_config.d/00-devenv.conf
    mkdir -p /run/sshd
    /usr/sbin/sshd -t   # a broken config fails the start, loudly, instead of a restart loop
    (
        while :; do
            # devenv's readiness probes read the banner and hang up: sshd logs each as "Connection closed by
            # ADDRESS port N [preauth]". Those lines (no user named: no login was tried) are dropped from the
            # environment's log; every other line, failed logins ("... authenticating user ...") included, stays.
            /usr/sbin/sshd -D -e 2>&1 \
                | grep --line-buffered -v -E '^Connection (closed|reset) by [0-9A-Fa-f.:]+ port [0-9]+ \[preauth\]$' >&2 \
                || true
            echo "devenv: sshd exited; restarting it" >&2
            sleep 1
        done
    ) &
fi

if [ "${DEVENV_JUPYTER:-1}" = 1 ]; then
    # jupyter_server_config.py reads the token from /etc/devenv/jupyter_token and refuses to run without it.
    app=server   # an image with jupyter-server only (no JupyterLab UI): the same kernels and API
    if command -v jupyter-lab >/dev/null 2>&1; then app=lab; fi
    if [ "$user" != root ]; then
        # Jupyter and its terminals are the user's: the token file becomes the user's to read, then the
        # privileges are dropped for good (setpriv: no PAM, no setuid helper left behind).
        chown "$user" /etc/devenv/jupyter_token
        home=$(getent passwd "$user" | cut -d: -f6)
        exec setpriv --reuid "$(id -u "$user")" --regid "$(id -g "$user")" --init-groups \
            env HOME="$home" USER="$user" LOGNAME="$user" jupyter "$app"
    fi
    exec jupyter "$app"
fi
exec sleep infinity
