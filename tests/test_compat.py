"""devenv.compat: version parsing, the cited tables, and verdicts drawn from the facts tables (cuda-compat.md)."""

from __future__ import annotations

import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest
import yaml

from devenv.compat import (
    CompatInputError,
    ComputeCapability,
    judge,
    load_tables,
    parse_cc,
    parse_cuda,
    parse_driver,
    parse_torch,
)
from devenv.compat.report import CompatReport

FIXTURES = Path(__file__).parent / "fixtures" / "compat"


def by_check(report: CompatReport, check: str):
    found = [f for f in report.findings if f.check == check]
    assert len(found) == 1, f"expected one {check!r} finding, got {[f.title for f in report.findings]}"
    return found[0]


# ---------------------------------------------------------------- versions

@pytest.mark.parametrize("low, high", [
    ("525.60.12", "525.60.13"),
    ("570.26", "570.26.1"),
    ("575.51.03", "580"),
    ("580", "580.65.06"),
    ("580.65.06", "580.159.04"),  # numeric, not string, order: 159 > 65
    ("450.80.02", "525.60.13"),
], ids=lambda v: v)
def test_driver_versions_order_numerically(low, high):
    assert parse_driver(low) < parse_driver(high)
    assert not parse_driver(high) < parse_driver(low)


def test_driver_versions_equal_with_missing_parts():
    assert parse_driver("570.26") == parse_driver("570.26.0")
    assert str(parse_driver("580.159.04")) == "580.159.04"  # the text is kept as given for display


@pytest.mark.parametrize("text, version, variant, cuda", [
    ("2.8.0+cu128", (2, 8), "cuda", "12.8"),
    ("2.11.0+cu130", (2, 11), "cuda", "13.0"),
    ("cu128", None, "cuda", "12.8"),
    ("2.1.2+cu118", (2, 1), "cuda", "11.8"),
    ("+cpu", None, "cpu", None),
    ("2.8.0+cpu", (2, 8), "cpu", None),
    ("2.8.0", (2, 8), "none", None),
    ("2.9.0.dev20250801+cu128", (2, 9), "cuda", "12.8"),
    ("2.5.1+rocm6.2", (2, 5), "rocm", None),
    ("2.8.0a0+5228986c39.nv25.05", (2, 8), "other", None),
], ids=lambda v: str(v))
def test_parse_torch_builds(text, version, variant, cuda):
    build = parse_torch(text)
    assert build.version == version
    assert build.variant == variant
    assert (build.cuda.release if build.cuda else None) == cuda


@pytest.mark.parametrize("parse, text, hint_part", [
    (parse_driver, "abc", "580.159.04"),
    (parse_driver, "12.8", "--cuda"),           # a CUDA version given as the driver
    (parse_driver, "580.1.2.3", "Driver Version"),
    (parse_cuda, "128", "12.8"),
    (parse_cuda, "twelve", "major.minor"),
    (parse_cc, "90", "9.0"),
    (parse_torch, "abc", "2.8.0+cu128"),
    (parse_torch, "+", "2.8.0+cu128"),
], ids=["driver-abc", "driver-is-cuda", "driver-4-parts", "cuda-128", "cuda-word", "cc-90", "torch-abc", "torch-plus"])
def test_bad_input_is_one_error_with_a_hint(parse, text, hint_part):
    with pytest.raises(CompatInputError) as info:
        parse(text)
    assert hint_part in info.value.hint


@pytest.mark.parametrize("text, expected", [("9.0", (9, 0)), ("12.1", (12, 1)), ("sm_120", (12, 0)),
                                            ("sm_90a", (9, 0))])
def test_parse_cc(text, expected):
    assert parse_cc(text) == ComputeCapability(*expected)


# ---------------------------------------------------------------- tables

def _raw(name: str) -> dict:
    return yaml.safe_load(resources.files("devenv.compat").joinpath("data", name).read_text())


@pytest.mark.parametrize("name, sections", [
    ("toolkit.yaml", ["minimum_driver", "releases", "dropped_architectures"]),
    ("torch_wheels.yaml", ["wheels"]),
    ("gpus.yaml", ["gpus"]),
])
def test_every_data_row_cites_its_source(name, sections):
    doc = _raw(name)
    for section in sections:
        assert doc[section], f"{name}: {section} is empty"
        for row in doc[section]:
            assert str(row.get("source", "")).strip(), f"{name}: {section} row without a source: {row}"


def test_release_drivers_rise_with_cuda_and_secondary_rows_are_marked():
    releases = sorted(load_tables().releases.values(), key=lambda r: r.cuda)
    drivers = [r.driver for r in releases]
    assert drivers == sorted(drivers) and len(set(drivers)) == len(drivers)
    assert {r.cuda.release for r in releases if r.secondary} == {"13.2", "13.3"}
    assert all("secondary" in r.source for r in releases if r.secondary)


def test_major_floors_match_the_facts():
    floors = {major: str(f.driver) for major, f in load_tables().floors.items()}
    assert floors == {11: "450.80.02", 12: "525.60.13", 13: "580"}


def test_wheel_rows_of_one_tag_do_not_overlap():
    tables = load_tables()
    for tag in {w.tag for w in tables.wheels}:
        rows = sorted(tables.wheels_for(tag), key=lambda w: w.torch_min)
        for before, after in zip(rows, rows[1:]):
            assert before.torch_max < after.torch_min, f"{tag}: {before.torch_range} overlaps {after.torch_range}"


def test_every_gpu_example_matches_its_own_row_and_no_other():
    gpus = load_tables().gpus
    for gpu in gpus:
        assert gpu.examples, f"{gpu.name} has no example name"
        for example in gpu.examples:
            matches = [g.name for g in gpus if g.pattern.search(example)]
            assert matches == [gpu.name], f"{example!r} matches {matches}"


@pytest.mark.parametrize("name, cc, forward_compat", [
    ("NVIDIA H200", "9.0", "yes"),
    ("NVIDIA A100-SXM4-80GB", "8.0", "yes"),
    ("NVIDIA L40S", "8.9", "yes"),
    ("NVIDIA L40", "8.9", "yes"),
    ("NVIDIA A10G", "8.6", "yes"),
    ("Tesla T4", "7.5", "yes"),
    ("NVIDIA B200", "10.0", "yes"),
    ("NVIDIA GeForce RTX 5090", "12.0", "no"),
    ("NVIDIA GeForce RTX 3090", "8.6", "no"),
    ("NVIDIA RTX A6000", "8.6", "maybe"),
    ("NVIDIA RTX 6000 Ada Generation", "8.9", "maybe"),
    ("Quadro RTX 6000", "7.5", "maybe"),
], ids=lambda v: str(v))
def test_gpu_lookup(name, cc, forward_compat):
    gpu = load_tables().find_gpu(name)
    assert gpu is not None and str(gpu.cc) == cc and gpu.forward_compat == forward_compat


def test_unknown_gpu_name_is_not_matched():
    assert load_tables().find_gpu("Mystery GPU 9000") is None
    assert load_tables().find_gpu("NVIDIA A1000") is None  # not an A10 nor an A100


# ---------------------------------------------------------------- driver vs CUDA

DRIVER_CASES = [
    # id, driver, cuda, gpu_name, status, requires subset, words in the reason
    ("12x-exact-floor", "525.60.13", "12.8", None, "warn", {"min_driver": "525.60.13", "full_driver": "570.26"},
     ["minor-version compatibility"]),
    ("12x-just-below-floor", "525.60.12", "12.8", None, "fail", {"min_driver": "525.60.13"}, ["below 525.60.13"]),
    ("12.0-own-driver-is-the-floor", "525.60.13", "12.0", None, "pass", {}, ["ships with"]),
    ("12.8-on-535-minor-version", "535.54.03", "12.8", None, "warn", {"full_driver": "570.26"},
     ["no PTX", "cudaErrorCallRequiresNewerDriver", "SASS"]),
    ("12.8-on-own-570.26", "570.26", "12.8", None, "pass", {}, ["570.26"]),
    ("12.8-patch-release", "570.26", "12.8.1", None, "pass", {}, ["ships with"]),
    ("12.9-on-h200-driver", "580.159.04", "12.9", "NVIDIA H200", "pass", {}, ["575.51.03"]),
    ("13.0-on-own-580.65.06", "580.65.06", "13.0", None, "pass", {}, ["ships with"]),
    ("13.0-on-580-floor", "580", "13.0", None, "warn", {"min_driver": "580", "full_driver": "580.65.06"},
     ["minor-version compatibility"]),
    ("13.0-below-580-consumer", "575.51.03", "13.0", "NVIDIA GeForce RTX 4090", "fail", {"min_driver": "580"},
     ["not supported", "804"]),
    ("13.0-below-580-datacenter", "575.51.03", "13.0", "NVIDIA H100 80GB HBM3", "fail",
     {"min_driver": "580", "cuda_compat_package": "cuda-compat-13-0"}, ["forward compatibility", "cuda-compat-13-0"]),
    ("13.0-below-580-workstation", "575.51.03", "13.0", "NVIDIA RTX A6000", "fail",
     {"cuda_compat_package": "cuda-compat-13-0"}, ["NGC Server Ready"]),
    ("12.4-on-470-l4-forward-compat", "470.42.01", "12.4", "NVIDIA L4", "fail",
     {"cuda_compat_package": "cuda-compat-12-4"}, ["data-center"]),
    ("12.8-below-floor-unknown-gpu", "520.61.05", "12.8", None, "fail",
     {"min_driver": "525.60.13", "cuda_compat_package": "cuda-compat-12-8"}, ["not known"]),
    ("11x-exact-floor", "450.80.02", "11.8", None, "warn", {"full_driver": "520.61.05"}, ["450.80.02"]),
    ("11x-below-floor", "450.80.01", "11.8", None, "fail", {"min_driver": "450.80.02"}, ["below 450.80.02"]),
    ("11.0-own-driver-below-11x-floor", "450.51.05", "11.0", None, "pass", {}, ["450.51.05"]),
    ("13.2-secondary-row", "595.45.04", "13.2", None, "pass", {}, ["595.45.04"]),
    ("13.2-on-13.1-driver", "590.44.01", "13.2", None, "warn", {"full_driver": "595.45.04"}, ["limits"]),
    ("12.7-unlisted-but-newer-driver", "580.65.06", "12.7", None, "pass", {}, ["backward compatibility"]),
    ("14.0-unknown-major", "700.1", "14.0", None, "unknown", {}, ["not in devenv's tables"]),
    ("10.2-no-table-old-driver", "440.33.01", "10.2", None, "unknown", {}, ["not in devenv's tables"]),
    ("no-driver", None, "12.8", None, "unknown", {"full_driver": "570.26"}, ["not known"]),
    ("driver-n/a", "[N/A]", "12.8", None, "unknown", {}, ["not known"]),
]


@pytest.mark.parametrize("driver, cuda, gpu_name, status, requires, words",
                         [c[1:] for c in DRIVER_CASES], ids=[c[0] for c in DRIVER_CASES])
def test_driver_vs_cuda(driver, cuda, gpu_name, status, requires, words):
    report = judge(driver=driver, cuda=cuda, gpu_name=gpu_name)
    finding = by_check(report, "driver")
    assert finding.status == status, finding.reason
    for key, value in requires.items():
        assert finding.requires.get(key) == value
    for word in words:
        assert word in finding.reason + " " + (finding.remedy or ""), finding.reason
    if status == "fail":
        assert finding.remedy and ">=" in finding.remedy  # the remedy names the minimum driver
    if status in ("pass", "warn", "fail"):
        assert finding.source


def test_consumer_gpu_below_floor_offers_no_cuda_compat():
    finding = by_check(judge(driver="575.51.03", cuda="13.0", gpu_name="NVIDIA GeForce RTX 5090"), "driver")
    assert "cuda_compat_package" not in finding.requires
    assert "cuda-compat" not in finding.remedy


def test_secondary_source_is_said():
    finding = by_check(judge(driver="595.45.04", cuda="13.2"), "driver")
    assert "secondary" in finding.source


# ---------------------------------------------------------------- GPU vs PyTorch build

ARCH_CASES = [
    # id, driver, gpu_cc, gpu_name, torch, status, words (reason/remedy/message)
    ("h200-cu128", "580.159.04", None, "NVIDIA H200", "2.8.0+cu128", "pass", ["sm_90"]),
    ("h200-cu130-2.11", "580.159.04", "9.0", "NVIDIA H200", "2.11.0+cu130", "pass", ["sm_90"]),
    ("rtx4090-runs-sm86-sass", "570.26", "8.9", None, "2.6.0+cu126", "pass", ["sm_86"]),
    ("b300-runs-sm100-sass", "580.65.06", None, "NVIDIA B300 SXM6 AC", "2.8.0+cu128", "pass", ["sm_100"]),
    ("gb10-12.1-runs-sm120-sass", "580.65.06", None, "NVIDIA GB10", "2.7.0+cu128", "pass", ["sm_120"]),
    ("rtx5090-cu128-2.7", "570.26", None, "NVIDIA GeForce RTX 5090", "2.7.0+cu128", "pass", ["sm_120"]),
    ("v100-cu128-2.8", "570.26", None, "Tesla V100-SXM2-16GB", "2.8.0+cu128", "pass", ["sm_70"]),
    ("k80-cu118", "520.61.05", None, "Tesla K80", "2.1.0+cu118", "pass", ["sm_37"]),
    ("b200-cu124-ptx-jit", "570.26", None, "NVIDIA B200", "2.5.1+cu124", "warn", ["compute_90", "slow first start"]),
    ("rtx5090-cu124-ptx-jit", "570.26", "12.0", None, "2.6.0+cu124", "warn", ["compute_90", "cu128"]),
    ("b200-cu124-ptx-but-minor-version-driver", "535.54.03", None, "NVIDIA B200", "2.5.1+cu124", "fail",
     ["minor-version compatibility", "no kernel image"]),
    ("rtx5090-cu126-no-kernel", "570.26", None, "NVIDIA GeForce RTX 5090", "2.6.0+cu126", "fail",
     ["sm_120 is not compatible with the current PyTorch installation", "no kernel image", "cu128 (torch 2.7"]),
    ("sm50-cu128-2.11", "580.65.06", "5.0", None, "2.11.0+cu128", "fail", ["no kernel image", "cu126"]),
    ("v100-cu130", "580.65.06", None, "Tesla V100-SXM2-16GB", "2.9.0+cu130", "fail", ["sm_70", "cu126"]),
    ("v100-cu128-2.7", "570.26", "7.0", None, "2.7.0+cu128", "fail", ["sm_70"]),
    ("k80-cu121", "530.30.02", "3.7", None, "2.1.0+cu121", "fail", ["cu118 (torch 2.0-2.5)"]),
    ("integrated-8.7-no-dgpu-sass", "580.65.06", "8.7", None, "2.8.0+cu128", "fail", ["no SASS for sm_87"]),
    ("b200-cu124-2.4-ptx-unknown", "580.65.06", "10.0", None, "2.4.0+cu124", "unknown", ["not known"]),
    ("cu128-tag-only-same-everywhere", "580.65.06", "12.0", None, "cu128", "pass", ["sm_120"]),
    ("cu128-tag-only-depends-on-version", "580.65.06", "7.0", None, "cu128", "unknown", ["depends on the torch"]),
    ("torch-version-not-in-table", "580.65.06", "9.0", None, "2.12.0+cu128", "unknown", ["no architecture list"]),
    ("no-local-tag", "580.65.06", "9.0", None, "2.8.0", "unknown", ["no local tag"]),
    ("vendor-build", "580.65.06", "9.0", None, "2.8.0a0+5228986c39.nv25.05", "unknown", ["not an official"]),
    ("cpu-build-on-gpu", "580.65.06", "9.0", None, "2.8.0+cpu", "fail", ["CPU-only", "sm_90"]),
    ("unknown-gpu", "580.65.06", None, "Mystery GPU 9000", "2.8.0+cu128", "unknown", ["compute capability"]),
]


@pytest.mark.parametrize("driver, gpu_cc, gpu_name, torch_build, status, words",
                         [c[1:] for c in ARCH_CASES], ids=[c[0] for c in ARCH_CASES])
def test_gpu_vs_torch_build(driver, gpu_cc, gpu_name, torch_build, status, words):
    report = judge(driver=driver, gpu_cc=gpu_cc, gpu_name=gpu_name, torch_build=torch_build)
    finding = by_check(report, "torch-arch")
    assert finding.status == status, finding.reason
    text = " ".join(filter(None, [finding.reason, finding.remedy, finding.message]))
    for word in words:
        assert word in text, text


def test_no_kernel_image_names_pytorchs_own_messages_and_a_build_that_works():
    report = judge(driver="570.26", gpu_name="NVIDIA GeForce RTX 5090", torch_build="2.6.0+cu126")
    finding = by_check(report, "torch-arch")
    assert finding.message.splitlines() == [
        "NVIDIA GeForce RTX 5090 with CUDA capability sm_120 is not compatible with the current PyTorch installation.",
        "The current PyTorch install supports CUDA capabilities sm_50 sm_60 sm_70 sm_75 sm_80 sm_86 sm_90.",
        "RuntimeError: CUDA error: no kernel image is available for execution on the device",
    ]
    assert "cu128" in finding.requires["torch_builds"]
    assert finding.requires["cuda"] == "12.8"
    assert "cu130" not in finding.requires["torch_builds"]  # driver 570 is below CUDA 13's floor (580)


def test_ptx_jit_warns_but_runs():
    report = judge(driver="570.26", gpu_name="NVIDIA B200", torch_build="2.5.1+cu124")
    assert report.verdict == "warn" and report.runs is True


def test_cuda13_dropped_volta_pascal_maxwell():
    report = judge(driver="580.65.06", cuda="13.0", gpu_name="Tesla P100-PCIE-16GB")
    finding = by_check(report, "toolkit-arch")
    assert finding.status == "fail" and "Pascal" in finding.reason
    assert finding.requires["torch_builds"] and all(t < "cu130" for t in finding.requires["torch_builds"])
    assert not [f for f in judge(driver="580.65.06", cuda="12.8", gpu_name="Tesla P100-PCIE-16GB").findings
                if f.check == "toolkit-arch"]
    assert not [f for f in judge(driver="580.65.06", cuda="13.0", gpu_cc="7.5").findings
                if f.check == "toolkit-arch"]


def test_torch_builds_own_cuda_is_judged_against_the_driver():
    # An image with CUDA 12.4 but a cu130 wheel: the wheel's CUDA 13.0 needs a 580 driver.
    report = judge(driver="570.26", cuda="12.4", gpu_cc="9.0", torch_build="2.9.0+cu130")
    drivers = [f for f in report.findings if f.check == "driver"]
    assert [f.status for f in drivers] == ["pass", "fail"]
    assert "torch 2.9.0+cu130" in drivers[1].title
    assert report.verdict == "fail"


def test_gpu_name_and_cc_disagree_warns_and_uses_the_cc_given():
    report = judge(driver="580.65.06", gpu_cc="8.0", gpu_name="NVIDIA H200", torch_build="2.8.0+cu128")
    assert by_check(report, "gpu").status == "warn"
    assert "sm_80" in by_check(report, "torch-arch").reason


@pytest.mark.parametrize("gpu_cc, torch_build, arch_list, status", [
    ("9.0", "2.8.0a0+5228986c39.nv25.05", ["sm_80", "sm_86", "sm_90", "sm_100", "sm_120", "compute_120"], "pass"),
    ("10.3", "2.8.0+cu128", ["sm_90", "sm_100"], "pass"),          # sm_100 SASS runs on 10.3
    ("10.3", "2.8.0+cu128", ["sm_90a", "sm_100a"], "fail"),        # arch-specific SASS runs on exactly its CC
    ("9.0", "2.8.0+cu128", ["sm_90a"], "pass"),
    ("12.0", "2.12.0+cu128", ["sm_80", "sm_90", "compute_90"], "warn"),  # measured list beats "not in table"
], ids=["vendor-build-measured", "family-sass", "arch-specific-sass", "arch-specific-exact", "measured-ptx"])
def test_measured_arch_list_replaces_the_table(gpu_cc, torch_build, arch_list, status):
    report = judge(driver="580.159.04", gpu_cc=gpu_cc, torch_build=torch_build, torch_arch_list=arch_list)
    finding = by_check(report, "torch-arch")
    assert finding.status == status, finding.reason
    assert finding.source == "torch.cuda.get_arch_list() read on the host"


def test_measured_arch_list_rejects_junk():
    with pytest.raises(CompatInputError):
        judge(gpu_cc="9.0", torch_build="2.8.0+cu128", torch_arch_list=["sm_90", "xx_1"])


# ---------------------------------------------------------------- the combined verdict

def test_real_h200_from_nvidia_smi_runs_cu128():
    """The recorded H200: driver 580.159.04, compute capability 9.0, nvidia-smi 'CUDA Version: 13.0'."""
    fields = [f.strip() for f in (FIXTURES / "h200_query-gpu_idle.csv").read_text().split(",")]
    name, driver, cc = fields[2], fields[3], fields[18]
    assert (name, driver, cc) == ("NVIDIA H200", "580.159.04", "9.0")
    report = judge(driver=driver, cuda="12.8", gpu_cc=cc, gpu_name=name, torch_build="2.8.0+cu128")
    assert report.verdict == "pass" and report.runs is True
    assert {f.check: f.status for f in report.findings} == {"gpu": "pass", "driver": "pass", "torch-arch": "pass"}
    assert judge(driver=driver, cuda="13.0", gpu_cc=cc, torch_build="2.11.0+cu130").verdict == "pass"


def test_fail_outranks_unknown():
    report = judge(driver=None, gpu_cc="12.0", torch_build="2.6.0+cu126")
    assert {f.status for f in report.findings} == {"unknown", "fail"}
    assert report.verdict == "fail" and report.runs is False


def test_unknown_when_nothing_sure():
    report = judge(cuda="12.8")
    assert report.verdict == "unknown" and report.runs is None
    assert judge().verdict == "unknown"


def test_to_dict_shape():
    report = judge(driver="535.54.03", cuda="12.8", gpu_name="NVIDIA A100-SXM4-80GB", torch_build="2.8.0+cu128")
    data = report.to_dict()
    assert list(data) == ["verdict", "runs", "summary", "reason", "remedy", "requires", "inputs", "findings"]
    assert data["verdict"] == "warn" and data["runs"] is True
    assert "minor-version compatibility" in data["reason"]
    assert data["requires"]["full_driver"] == "570.26"
    assert data["remedy"] == ["for full support upgrade the driver to >= 570.26, the driver CUDA 12.8 ships with"]
    assert data["inputs"] == {"driver": "535.54.03", "cuda": "12.8", "gpu_cc": "8.0",
                              "gpu_name": "NVIDIA A100-SXM4-80GB", "torch": "2.8.0+cu128"}
    assert set(data["findings"][0]) == {"check", "status", "title", "value", "reason", "remedy", "source",
                                        "requires", "message"}


def test_judge_rejects_malformed_strings():
    with pytest.raises(CompatInputError):
        judge(driver="abc", cuda="12.8")


def test_compat_is_layer0():
    """Only the standard library and pyyaml: no click, paramiko, docker, textual or torch."""
    code = ("import sys, devenv.compat; devenv.compat.judge(driver='580.159.04', cuda='12.8', gpu_cc='9.0'); "
            "top = {m.split('.')[0] for m in sys.modules}; "
            "bad = {'click', 'paramiko', 'docker', 'textual', 'torch', 'rich'} & top; "
            "print(sorted(bad))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
