# devenv: login shells (ssh, Jupyter terminals) use the environment's python and start in the workspace.
export VIRTUAL_ENV=/opt/venv
case ":$PATH:" in *":/opt/venv/bin:"*) ;; *) PATH="/opt/venv/bin:$PATH" ;; esac
export PATH
if [ "$PWD" = "$HOME" ] && [ -d /workspace ]; then cd /workspace; fi
