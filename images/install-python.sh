#!/bin/sh
# The environment's Python: a venv in /opt/venv with JupyterLab and (optionally) torch.
# --system-site-packages: a base that already ships torch (pytorch/pytorch) keeps it usable.
set -eu
here=/tmp/devenv-build   # this script and the wheelhouse's files, if any

python3 -m venv --system-site-packages /opt/venv
pip=/opt/venv/bin/pip
# --no-compile: no .pyc for every module of torch and JupyterLab at build time (42 s of a 113 s step and 160 MB
# of the image, benchmarks/image_build_steps.py); Python writes them for the modules really imported, on first
# import (about 2 s more on the first `import torch`), into the venv its user owns.
set -- --no-cache-dir --progress-bar off --no-compile
for f in "$here"/*.whl "$here"/*.tar.gz; do
    [ -e "$f" ] && { set -- "$@" --find-links "$here"; break; }
done
if [ "${OFFLINE:-0}" = 1 ]; then
    set -- "$@" --no-index
fi

if [ -n "${TORCH_VERSION:-}" ]; then
    spec="torch==${DEVENV_TORCH:-$TORCH_VERSION}"
    if ls "$here"/torch-"${TORCH_VERSION}"*.whl >/dev/null 2>&1 || [ "${OFFLINE:-0}" = 1 ]; then
        # torch from the wheelhouse; its dependencies from the default index (or the wheelhouse too).
        echo "devenv: installing $spec from the wheelhouse"
        $pip install "$@" "$spec"
    else
        echo "devenv: installing $spec from $TORCH_INDEX_URL"
        $pip install "$@" --index-url "$TORCH_INDEX_URL" --extra-index-url https://pypi.org/simple "$spec"
    fi
fi
$pip install "$@" "jupyterlab>=4,<5" ipykernel numpy

if [ -n "${DEVENV_TORCH:-}" ]; then
    # The org.devenv.torch label must tell the truth: `devenv check` compares it with the host's driver.
    got=$(/opt/venv/bin/python -c 'import torch; print(torch.__version__)')
    if [ "$got" != "$DEVENV_TORCH" ]; then
        echo "devenv: torch is $got but the environment declares $DEVENV_TORCH" >&2
        exit 1
    fi
    echo "devenv: torch $got"
fi
# What every environment's start imports, byte-compiled here by importing it once: JupyterLab's server and the
# kernel (and torch, where installed). Without it each new container compiled them again on its first start (they
# are written into the container, not the image): JupyterLab's start took 2.55 s CPU there against 1.26 s with
# them (docs/benchmarks.md, "Bytecode for what an environment's start imports"). Only what is imported, not every
# module (--no-compile above says why); a module that does not import is left to compile when it is used.
PYTHONDONTWRITEBYTECODE='' /opt/venv/bin/python - <<'EOF_WARM' || echo "devenv: warning: could not byte-compile the start's modules (the environment still works)"
import importlib
for name in ("jupyterlab.labapp", "jupyter_server.serverapp", "jupyterlab_server", "jupyter_lsp", "notebook_shim",
             "jupyter_server_terminals", "terminado", "ipykernel.kernelapp", "ipykernel.ipkernel", "torch"):
    try:
        importlib.import_module(name)
    except Exception:  # noqa: BLE001  (an optional part that is not installed)
        pass
EOF_WARM
# DEVENV_BUILD_KEEP=1: install-extra.sh runs next from the same folder (devenv's run + commit build removes it)
[ "${DEVENV_BUILD_KEEP:-0}" = 1 ] || rm -rf "$here"
