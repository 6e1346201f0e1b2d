"""paramiko, imported without invoke.

paramiko.config imports invoke (a task runner) at import time only to evaluate `Match exec` in paramiko's own
ssh_config parser, which devenv never uses (OpenSSH's `ssh -G`, or devenv.remote.sshconfig_parser, resolves
the config). invoke and what it pulls in (unittest.mock, asyncio) are about 40 % of importing paramiko, paid
by every command that connects. So paramiko is imported here with invoke marked absent, once per process;
a process that has already imported invoke keeps it. Every devenv module takes paramiko from here.
"""

from __future__ import annotations

import sys

_hidden = "invoke" not in sys.modules
if _hidden:
    sys.modules["invoke"] = None  # type: ignore[assignment]  # `import invoke` now raises ImportError
try:
    import paramiko
    import paramiko.agent
finally:
    if _hidden and sys.modules.get("invoke", 0) is None:
        del sys.modules["invoke"]  # later `import invoke` (someone else's) works as usual

__all__ = ["paramiko"]
