"""services.background_tunnels' records: private files, one ID per forward (a second start finds the first), a
record whose holder is gone (or whose pid now belongs to another program) is stale and removed when read."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

from devenv.services import background_tunnels as registry
from devenv.services.background_tunnels import TunnelRecord


def test_the_same_forward_has_the_same_id_and_names_stay_safe():
    assert registry.tunnel_id("gpu1", None, "jupyter") == registry.tunnel_id("gpu1", None, "jupyter")
    assert registry.tunnel_id("gpu1", "cuda", "jupyter") != registry.tunnel_id("gpu1", "cpu", "jupyter")
    assert "/" not in registry.tunnel_id("../../etc", "a b", "ports-1:2")


def test_a_live_holder_s_record_is_kept_private_and_a_dead_or_foreign_one_is_dropped():
    tid = registry.tunnel_id("gpu1", "cuda", "jupyter")
    holder = subprocess.Popen([sys.executable, "-c", "import sys; print('up', flush=True); sys.stdin.read()",
                               "--held-as", tid], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline() == "up\n"   # exec'd: its command line is the holder's, not pytest's
    try:
        registry.write(TunnelRecord(tid, holder.pid, "gpu1", "cuda", "jupyter",
                                    [{"local_port": 8888, "env_port": 8888}], "http://127.0.0.1:8888/lab?token=x",
                                    state="open"))
        path = registry.folder() / f"{tid}.json"
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert [r.id for r in registry.all_records()] == [tid]
        # a pid that is not a holder of this ID (reused by another program): stale
        registry.write(TunnelRecord("other", os.getpid(), "gpu1", "cpu", "ports", []))
        assert [r.id for r in registry.all_records()] == [tid]
        assert not (registry.folder() / "other.json").exists()
    finally:
        holder.stdin.close()
        holder.wait(10)
        holder.stdout.close()
    assert registry.find(tid) is None and not path.exists()   # the holder ended: its record goes on the next read


def test_an_id_that_is_a_path_is_refused_as_bad_input():
    import pytest

    from devenv.errors import BadInput

    for bad in ("../../etc/passwd", "/tmp/x", "", ".hidden", "a/b"):
        with pytest.raises(BadInput):
            registry.find(bad)
