"""services.image_offer's pure parts and up's flags that are refused before connecting (the offer itself, over
real hosts: tests/integration/test_image_push.py)."""

from __future__ import annotations

from click.testing import CliRunner

from devenv.cli import main
from devenv.services import image_offer


def test_the_offer_names_the_push_as_typed():
    offer = image_offer.PushOffer("gpu2", "gpu1", "cuda", "devenv/pytorch:cu")
    assert offer.command() == "devenv image push gpu1 gpu2 --env cuda"
    odd = image_offer.PushOffer("gpu2", "gpu1", "my env", "x")
    assert odd.command().endswith("--env 'my env'")


def test_the_fleet_of_a_host_is_the_other_hosts_of_its_groups(tmp_path, monkeypatch):
    hosts = tmp_path / "profiles" / "hosts"
    hosts.mkdir(parents=True)
    for name, groups in (("a", "[tlab, tbig]"), ("b", "[tlab]"), ("c", "[tbig]"), ("d", "[tother]"), ("e", "[]")):
        (hosts / f"{name}.yaml").write_text(f"ssh:\n  hostname: 127.0.0.1\ngroups: {groups}\n")
    monkeypatch.setenv("DEVENV_HOME", str(tmp_path))
    assert image_offer._fleet_of("a") == ["b", "c"]
    assert image_offer._fleet_of("b") == ["a"]
    assert image_offer._fleet_of("e") == []
    assert image_offer._fleet_of("no-such-host") == []


def test_push_from_and_no_push_are_refused_before_connecting():
    result = CliRunner().invoke(main, ["up", "nowhere.invalid", "--push-from", "gpu1", "--no-push"])
    assert result.exit_code == 2 and "contradict" in result.output
