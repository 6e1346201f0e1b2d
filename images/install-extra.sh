#!/bin/sh
# What a profile adds to devenv's image: `pip` (its pip: list into /opt/venv), `apt` (its apt: list), `user`
# (the environment's user, made unless the base image has it). The lists were validated by devenv as package
# specs (no options, URLs or shell text); they are split into arguments here with globbing off, never run as
# a shell line.
set -eu
set -f
here=/tmp/devenv-build

for what in "$@"; do
    case "$what" in
    pip)
        [ -n "${DEVENV_PIP:-}" ] || continue
        set -- --no-cache-dir --progress-bar off --no-compile  # as install-python.sh, and why there
        for f in "$here"/*.whl "$here"/*.tar.gz; do
            [ -e "$f" ] && { set -- "$@" --find-links "$here"; break; }
        done
        [ "${OFFLINE:-0}" = 1 ] && set -- "$@" --no-index
        echo "devenv: pip install $DEVENV_PIP"
        # shellcheck disable=SC2086
        /opt/venv/bin/pip install "$@" $DEVENV_PIP
        ;;
    apt)
        [ -n "${DEVENV_APT:-}" ] || continue
        if ! command -v apt-get >/dev/null 2>&1; then
            echo "devenv: apt: $DEVENV_APT asked for, but the base image has no apt-get" >&2
            exit 1
        fi
        export DEBIAN_FRONTEND=noninteractive
        echo "devenv: apt-get install $DEVENV_APT"
        apt-get update -qq
        # shellcheck disable=SC2086
        apt-get install -y -qq --no-install-recommends $DEVENV_APT
        rm -rf /var/lib/apt/lists/*
        ;;
    user)
        u=${DEVENV_USER:-root}
        [ "$u" != root ] || continue
        if ! id "$u" >/dev/null 2>&1; then
            shell=/bin/sh
            [ -x /bin/bash ] && shell=/bin/bash
            if command -v useradd >/dev/null 2>&1; then
                useradd --create-home --shell "$shell" "$u"
            elif command -v adduser >/dev/null 2>&1; then
                adduser -D -s "$shell" "$u"
            else
                echo "devenv: the base image has no user $u and no useradd/adduser to make one" >&2
                exit 1
            fi
            echo "devenv: made the user $u"
        fi
        # sshd refuses key logins for a locked account ("!") when PAM is off; "*" still allows no password.
        if grep -q "^$u:!" /etc/shadow 2>/dev/null; then
            sed -i "s/^$u:![^:]*:/$u:*:/" /etc/shadow
        fi
        home=$(getent passwd "$u" | cut -d: -f6)
        mkdir -p "$home"
        chown "$u" "$home"
        ;;
    esac
done
