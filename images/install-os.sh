#!/bin/sh
# OS packages for the environment: python with venv, sshd, TLS roots, and the daily tools (git, rsync for
# `devenv sync`, vim). Installs only what the base lacks, so a base that has everything builds without
# reaching an apt mirror.
set -eu
here=/tmp/devenv-build

need=""
command -v python3 >/dev/null 2>&1 || need="$need python3"
python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || need="$need python3-venv"
[ -x /usr/sbin/sshd ] || need="$need openssh-server"
[ -f /etc/ssl/certs/ca-certificates.crt ] || need="$need ca-certificates"
command -v ps >/dev/null 2>&1 || need="$need procps"
# The daily tools are wanted, not needed: a host without an apt mirror still gets its environment.
want=""
command -v git >/dev/null 2>&1 || want="$want git"
command -v rsync >/dev/null 2>&1 || want="$want rsync"
command -v vim >/dev/null 2>&1 || command -v vi >/dev/null 2>&1 || want="$want vim-tiny"
# The proxy's CA must be trusted before apt reaches an https mirror.
if [ -n "$need$want" ] && [ -f "$here/extra-ca.crt" ]; then
    mkdir -p /etc/ssl/certs && cat "$here/extra-ca.crt" >>/etc/ssl/certs/ca-certificates.crt
fi
if [ -n "$need" ]; then
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "devenv: the base image lacks:$need, and has no apt-get to install them" >&2
        exit 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    # shellcheck disable=SC2086
    apt-get install -y -qq --no-install-recommends $need
fi
if [ -n "$want" ] && command -v apt-get >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    # shellcheck disable=SC2086
    { [ -n "$need" ] || apt-get update -qq; } && apt-get install -y -qq --no-install-recommends $want \
        || echo "devenv: could not install$want (no apt mirror?); the environment works without them" >&2
fi
rm -rf /var/lib/apt/lists/*

if [ -f "$here/extra-ca.crt" ]; then
    # Trusted system-wide (pip, requests, curl in the environment), and again by update-ca-certificates.
    mkdir -p /usr/local/share/ca-certificates
    cp "$here/extra-ca.crt" /usr/local/share/ca-certificates/devenv-extra-ca.crt
    if command -v update-ca-certificates >/dev/null 2>&1; then update-ca-certificates >/dev/null 2>&1 || true; fi
    grep -q "$(sed -n 2p "$here/extra-ca.crt")" /etc/ssl/certs/ca-certificates.crt \
        || cat "$here/extra-ca.crt" >>/etc/ssl/certs/ca-certificates.crt
fi

# sshd refuses even key logins for a locked account ("!") when PAM is off; "*" still allows no password.
if grep -q '^root:!' /etc/shadow; then sed -i 's/^root:![^:]*:/root:*:/' /etc/shadow; fi
# Host keys are made per container at start (entrypoint.sh), never baked into the image.
rm -f /etc/ssh/ssh_host_*
