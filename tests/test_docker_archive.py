"""The tar put_files sends to the engine's archive endpoint: exact, with no record padding after its end."""
import io
import tarfile

from devenv.runtimes.docker_runtime import archive_of


def test_the_archive_ends_right_after_its_two_end_blocks_and_reads_back_whole():
    files = [("/opt/devenv/a.sh", b"echo a\n", 0o755), ("/etc/x" + "/y" * 80, b"z" * 700, 0o600)]  # a long name: pax
    data = archive_of(files, mtime=1_700_000_000)
    assert data[-1024:] == b"\0" * 1024 and len(data) % 512 == 0
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        members = tar.getmembers()
        assert [(m.name, m.mode, m.size) for m in members] == [(p.lstrip("/"), mode, len(d)) for p, d, mode in files]
        assert [tar.extractfile(m).read() for m in members] == [d for _, d, _ in files]   # type: ignore[union-attr]
        end = tar.offset          # where the reader stopped: the first end block
    # Nothing after the end-of-archive marker: podman stops reading there (buildah #6573), and tarfile's own
    # padding to a 10 KiB record (what was sent before) broke its pipe now and then.
    assert len(data) == end + 1024 and len(data) % tarfile.RECORDSIZE != 0


def test_a_build_container_is_named_after_its_image_so_builds_beside_it_leave_it_alone():
    import re

    from devenv.runtimes.docker_runtime import build_container_prefix

    long = "registry.example:5000/team/" + "x" * 80
    tags = ["devenv-test/pytorch:broken-a", "devenv-test/pytorch:broken-ab", long + ":1", long + ":2"]
    prefixes = [build_container_prefix(t) for t in tags]
    assert all(re.fullmatch(r"devenv\.build\.[A-Za-z0-9_.-]+\.", p) for p in prefixes), prefixes
    assert len(set(prefixes)) == 4          # cut alike at 60 characters, told apart by the hash
    assert not any(a != b and b.startswith(a) for a in prefixes for b in prefixes)   # none a prefix of another's
