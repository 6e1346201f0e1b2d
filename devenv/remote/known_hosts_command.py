"""KnownHostsCommand, run as OpenSSH 9.2 runs it (sshconnect.c, load_hostkeys_command):

- the command is split into words as ssh's argv_split does (quotes and backslashes; no shell), and the
  %-tokens and ${VAR} are expanded in every word but the first (ssh's client tokens, plus %H the name looked
  up, %I the invocation, %t the key's type, %f its fingerprint, %K its base64; NONE before a key is known);
- the first word must be an absolute path; a command that is missing is skipped (ssh logs it and goes on
  without its keys), which the unknown-key error then says;
- it runs with stdin from /dev/null and the caller's environment; what it prints is read as known_hosts lines
  (markers included) for the name looked up, after the files;
- a command that exits non-zero, is killed or cannot be executed ends the connection, as in ssh
  ("KnownHostsCommand failed"). devenv also bounds it in time, where ssh waits forever.

ssh asks it twice per hop: ORDER (no key yet, for the order of host-key algorithms; %H is the host name) and
HOSTNAME (the key presented; %H is the known_hosts name, [host]:port or the HostKeyAlias). CheckHostIP's
ADDRESS call is not made: CheckHostIP is off by default and devenv never checks the address.
"""

from __future__ import annotations

import base64
import os
import selectors
import shlex
import signal
import subprocess
import time
from dataclasses import dataclass, field
from typing import Any

from devenv.errors import HostKeyError
from devenv.remote.known_hosts_lines import KnownKey, entries_for, fingerprint

TIMEOUT_S = 30.0
_OUTPUT_LIMIT = 1 << 20     # known_hosts lines, not a stream: more than a MiB is not read


@dataclass(frozen=True)
class CommandKeys:
    keys: list[KnownKey] = field(default_factory=list)
    problem: str | None = None     # why it gave no keys although set (said with an unknown key)


def command_of(hop: Any) -> str | None:
    text = str((getattr(hop, "options", None) or {}).get("knownhostscommand") or "").strip()
    return None if not text or text.lower() == "none" else text


def run(hop: Any, invocation: str, name: str, key: Any = None) -> CommandKeys:
    """The keys the hop's KnownHostsCommand prints for name ([] when none is set); raises HostKeyError where
    ssh would end the connection."""
    template = command_of(hop)
    if template is None:
        return CommandKeys()
    label = getattr(hop, "label", name)
    argv = _argv(template, hop, invocation, name, key, label)
    if not os.path.isabs(argv[0]):
        return CommandKeys(problem=f"KnownHostsCommand was not run: its path {argv[0]!r} is not absolute")
    if not os.path.exists(argv[0]):
        return CommandKeys(problem=f"KnownHostsCommand was not run: {argv[0]} does not exist")
    try:
        code, out, err = _run_bounded(argv)
    except OSError as e:      # ssh's child fails to exec and exits 127: the connection ends
        raise HostKeyError(f"KnownHostsCommand for {label} cannot be executed: {e.strerror or e}",
                           f"make {argv[0]} executable, or fix KnownHostsCommand in your ssh config") from None
    if code is None:
        raise HostKeyError(f"KnownHostsCommand for {label} did not finish within {TIMEOUT_S:g} s, or printed more "
                           f"than {_OUTPUT_LIMIT >> 20} MiB (it was stopped)", f"run it by hand to see why: {template}")
    if code != 0:
        how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
        tail = " | ".join(err.decode(errors="replace").strip().splitlines()[-3:])
        raise HostKeyError(f"KnownHostsCommand for {label} {how}" + (f": {tail}" if tail else ""),
                           f"ssh ends the connection too; run it by hand to see why: {template}")
    lines = out.decode(errors="replace").splitlines()
    return CommandKeys(entries_for(name, lines, f"KnownHostsCommand {argv[0]}"))


def _run_bounded(argv: list[str]) -> tuple[int | None, bytes, bytes]:
    """(exit code, stdout, stderr's tail); code None when it ran past TIMEOUT_S or printed more than
    _OUTPUT_LIMIT, and was killed (a runaway command never fills the laptop's memory)."""
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    out, err = bytearray(), bytearray()
    deadline = time.monotonic() + TIMEOUT_S
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ, out)        # type: ignore[arg-type]
        sel.register(proc.stderr, selectors.EVENT_READ, err)        # type: ignore[arg-type]
        while sel.get_map() and time.monotonic() < deadline and len(out) <= _OUTPUT_LIMIT:
            for ready, _ in sel.select(timeout=max(0.0, deadline - time.monotonic())):
                chunk = os.read(ready.fd, 65536)
                if not chunk:
                    sel.unregister(ready.fileobj)
                else:
                    ready.data.extend(chunk)
                    del err[:-4096]                                  # of stderr only the tail is quoted
        unread = bool(sel.get_map())
    try:
        if unread or len(out) > _OUTPUT_LIMIT:
            raise subprocess.TimeoutExpired(argv, TIMEOUT_S)
        proc.wait(max(0.1, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        proc.wait()
        return None, b"", b""
    finally:
        proc.stdout.close()                                          # type: ignore[union-attr]
        proc.stderr.close()                                          # type: ignore[union-attr]
    return proc.returncode, bytes(out), bytes(err)


def _argv(template: str, hop: Any, invocation: str, name: str, key: Any, label: str) -> list[str]:
    from devenv.remote.ssh_tokens import expand_tokens, local_user, token_table

    try:
        words = shlex.split(template)
    except ValueError:
        raise HostKeyError(f"KnownHostsCommand for {label} contains invalid quotes",
                           "fix the quoting of KnownHostsCommand in your ssh config") from None
    if not words:
        raise HostKeyError(f"KnownHostsCommand for {label} yielded no arguments",
                           "fix KnownHostsCommand in your ssh config, or set it to none")
    tokens = token_table(hostname=hop.hostname, port=hop.port, user=getattr(hop, "user", "") or local_user(),
                         original=getattr(hop, "original", "") or hop.hostname,
                         alias=getattr(hop, "host_key_alias", None))
    tokens.update(H=name, I=invocation, t="NONE", f="NONE", K="NONE")
    if key is not None:
        tokens.update(t=key.get_name(), f=fingerprint(key.asbytes()),
                      K=base64.b64encode(key.asbytes()).decode())
    return [words[0], *(expand_tokens(w, tokens, "KnownHostsCommand", env=True) for w in words[1:])]
