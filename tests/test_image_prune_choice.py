"""What `image prune` removes and keeps (devenv/services/environments/docker/prune.py), over an engine's answers as
dockerd and podman give them; the real engines are tests/integration/environments/test_image_prune.py."""

from __future__ import annotations

from devenv.env.info import StoredImage
from devenv.errors import DevenvError
from devenv.services.environments.docker.prune import prune


class Engine:
    def __init__(self, images: list[StoredImage], used: dict[str, list[str]], refuses: set[str] = frozenset()):
        self.images, self.used, self.refuses = images, used, refuses
        self.removed: list[str] = []

    def images_labelled(self, label: str) -> list[StoredImage]:
        return [i for i in self.images if label in i.labels]

    def images_in_use(self) -> dict[str, list[str]]:
        return self.used

    def remove_image(self, image_id: str) -> None:
        if image_id in self.refuses:
            raise DevenvError("Docker on h refused to remove image: image has dependent child images")
        self.removed.append(image_id)


def image(id_: str, tags: tuple[str, ...], created: int, env: str | None = "e") -> StoredImage:
    return StoredImage(id_, tags, 100, created, {"org.devenv.env": env} if env else {"com.example": "1"})


def test_old_builds_go_newest_first_and_used_named_foreign_and_refused_images_stay():
    engine = Engine([image("base", ("devenv-dc-base/p:1",), 1), image("old", (), 2), image("dc", ("devenv-dc/p:2",), 3),
                     image("used", ("devenv-dc/p:3",), 4), image("named", ("localhost/devenv/pytorch:cpu",), 5),
                     image("theirs", ("tool/x:1",), 6, env=None)],
                    used={"used": ["devenv-t-e"]}, refuses={"base"})
    steps: list[str] = []
    outcome = prune(engine, {"devenv/pytorch:cpu"}, None, False, steps.append)  # type: ignore[arg-type]
    assert engine.removed == ["dc", "old"]                                      # newest first, before its base
    said = {i.id: (i.action, i.reason) for i in outcome.images}
    assert "theirs" not in said                                                 # another tool's: never looked at
    assert said["used"] == ("kept", "used by container devenv-t-e")
    assert said["named"][0] == "kept" and "devenv/pytorch:cpu" in said["named"][1]   # podman's localhost/ prefix
    assert said["base"][0] == "kept" and "dependent child images" in said["base"][1]
    assert said["old"] == ("removed", "no container uses it (untagged: a later build took its tag)")
    assert steps == ["Removing devenv-dc/p:2 (0.00 GB, built for 'e')",
                     "Removing untagged image old (0.00 GB, built for 'e')",
                     "Removing devenv-dc-base/p:1 (0.00 GB, built for 'e')"]
    assert outcome.freed_bytes == 200


def test_a_dry_run_removes_nothing_and_env_narrows_it():
    engine = Engine([image("a", (), 1, env="one"), image("b", (), 2, env="two")], used={})
    outcome = prune(engine, set(), "two", True, lambda text: None)  # type: ignore[arg-type]
    assert engine.removed == [] and [(i.id, i.action) for i in outcome.images] == [("b", "remove")]
