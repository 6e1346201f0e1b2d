# devenv's PyTorch environment: JupyterLab and sshd, started by entrypoint.sh.
# One file for every base: NVIDIA's or PyTorch's CUDA images for users, a local Debian base in tests.
#
#   BASE_IMAGE       nvidia/cuda:12.8.1-cudnn-runtime-ubuntu24.04, devenv-base:bookworm, ...
#   TORCH_VERSION    e.g. 2.11.0; empty: no torch (a slim image, or a base that already has it)
#   TORCH_INDEX      wheel variant (cu128, cu126, cpu): the +local tag and the index folder
#   TORCH_INDEX_URL  where torch wheels come from (default: download.pytorch.org/whl/$TORCH_INDEX)
#   DEVENV_CUDA      CUDA version declared in the org.devenv.cuda label (empty for CPU)
#   DEVENV_TORCH     torch build declared in the org.devenv.torch label; the build fails if torch differs
#   OFFLINE          1: pip uses only the wheelhouse (hosts without internet)
#   DEVENV_PIP       the profile's pip: list (requirement specs, validated by devenv), into /opt/venv
#   DEVENV_APT       the profile's apt: list (package names, validated by devenv), in the final image
#   DEVENV_USER      the user exec, ssh, sync and Jupyter run as (made unless the base has it); root by default
#
# Built by `devenv image build` with the classic builder (docker-py speaks no BuildKit), so no RUN --mount
# and no build secrets. Optional inputs come through the build context, matched by [x] globs so that a
# plain `docker build -f pytorch.Dockerfile .` works without them:
#   extra-ca.crt     CA bundle for hosts behind TLS-inspecting proxies (kept in the image: the user's pip
#                    inside the environment needs it too)
#   wheels/          a wheelhouse (pip --find-links), used only in the builder stage, never shipped
ARG BASE_IMAGE=nvidia/cuda:12.8.1-cudnn-runtime-ubuntu24.04

# --- base: OS packages every stage needs ---------------------------------------------------------
FROM ${BASE_IMAGE} AS base
ENV LANG=C.UTF-8 \
    PIP_CERT=/etc/ssl/certs/ca-certificates.crt \
    REQUESTS_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1
COPY install-os.sh extra-ca.cr[t] /tmp/devenv-build/
RUN sh /tmp/devenv-build/install-os.sh && rm -rf /tmp/devenv-build

# --- runtime: base + the profile's apt packages and user + devenv's runtime files (everything but the venv) --
# Before the builder stage: the classic builder builds every stage up to a --target, and devenv's docker build
# (DockerRuntime.build_by_commit) builds only up to here, then makes /opt/venv in a container of this image
# (install-python.sh, install-extra.sh pip) and commits it: no copy of the ~1 GB venv between stages.
FROM base AS runtime
ARG DEVENV_CUDA=
ARG DEVENV_TORCH=
# The profile's apt packages and the environment's user (a change rebuilds only from here).
ARG DEVENV_APT=
ARG DEVENV_USER=root
COPY install-extra.sh /tmp/devenv-build/
RUN sh /tmp/devenv-build/install-extra.sh apt user && rm -rf /tmp/devenv-build
COPY entrypoint.sh /usr/local/bin/devenv-entrypoint
COPY ready.py /usr/local/bin/devenv-ready
COPY jupyter_server_config.py /etc/jupyter/jupyter_server_config.py
# a tool's own JupyterLab: no "get notified about official Jupyter news?" prompt (its announcements plugin off)
COPY jupyter_page_config.json /etc/jupyter/labconfig/page_config.json
COPY sshd_devenv.conf /etc/ssh/sshd_config.d/00-devenv.conf
COPY profile_devenv.sh /etc/profile.d/00-devenv.sh
RUN chmod 0755 /usr/local/bin/devenv-entrypoint /usr/local/bin/devenv-ready \
 && mkdir -p /etc/devenv /workspace && chmod 0755 /etc/devenv && chown "${DEVENV_USER}" /workspace
ENV VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
LABEL org.devenv.image="pytorch" \
      org.devenv.cuda="${DEVENV_CUDA}" \
      org.devenv.torch="${DEVENV_TORCH}"
WORKDIR /workspace
EXPOSE 8888 22
ENTRYPOINT ["/usr/local/bin/devenv-entrypoint"]

# --- builder: the Python environment (the wheelhouse stays in this stage) -------------------------
FROM base AS builder
ARG TORCH_VERSION=2.11.0
ARG TORCH_INDEX=cu128
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/${TORCH_INDEX}
ARG DEVENV_TORCH=
ARG OFFLINE=0
# wheel[s] copies the wheelhouse's files (not the folder) next to the script, when there is one.
COPY install-python.sh wheel[s] /tmp/devenv-build/
RUN sh /tmp/devenv-build/install-python.sh
# The profile's own pip packages: a step of their own, so a change reuses the venv above.
ARG DEVENV_PIP=
COPY install-extra.sh wheel[s] /tmp/devenv-build/
RUN sh /tmp/devenv-build/install-extra.sh pip

# --- final: runtime + the venv (a plain `docker build`, podman's buildah, and devenv on other engines) ------
FROM runtime
ARG DEVENV_USER=root
COPY --from=builder --chown=${DEVENV_USER} /opt/venv /opt/venv
