"""Driver vs CUDA toolkit: full support, minor-version compatibility (with limits), or not at all.

Rules (see data/toolkit.yaml for the sources):
- driver >= the driver the toolkit release ships with: runs (backward compatibility also makes any driver that
  runs a newer release run this one);
- driver >= the toolkit major's floor: runs through minor-version compatibility, with limits;
- below the floor: does not run; a data-center GPU can run it with the forward-compatibility package.
Anything the tables do not cover is "unknown", never a guess.
"""

from __future__ import annotations

from devenv.checks.report import FAIL, PASS, UNKNOWN, WARN
from devenv.compat.report import Finding
from devenv.compat.tables import GpuModel, Tables, ToolkitRelease
from devenv.compat.versions import CudaVersion, DriverVersion


def _release_source(release: ToolkitRelease) -> str:
    return release.source + (" (secondary source)" if release.secondary else "")


def _newer_release_run_by(driver: DriverVersion, cuda: CudaVersion, tables: Tables) -> ToolkitRelease | None:
    """A known release at or above `cuda` whose driver `driver` meets: then `cuda` runs in full too."""
    upper = cuda if cuda.minor is not None else CudaVersion(cuda.major, 99)
    newer = sorted((r for r in tables.releases.values() if r.cuda >= upper), key=lambda r: r.cuda)
    return next((r for r in newer if driver >= r.driver), None)


def check_driver(
    driver: DriverVersion | None,
    cuda: CudaVersion,
    tables: Tables,
    gpu: GpuModel | None = None,
    via: str = "",
) -> Finding:
    """Judge one driver against one CUDA version. `via` names where the CUDA version came from (a torch build)."""
    title = f"driver vs CUDA {cuda}" + (f" ({via})" if via else "")
    floor = tables.floors.get(cuda.major)
    release = tables.release(cuda)
    requires: dict[str, str] = {}
    if floor:
        requires["min_driver"] = str(floor.driver)
    if release:
        requires["full_driver"] = str(release.driver)

    if driver is None:
        return Finding(
            "driver", UNKNOWN, title, f"driver unknown, CUDA {cuda}",
            "the driver version is not known, so whether CUDA runs cannot be told",
            "give the driver version nvidia-smi prints (--driver)", None, requires,
        )
    value = f"driver {driver}, CUDA {cuda}"

    if release and driver >= release.driver:
        return Finding(
            "driver", PASS, title, value,
            f"driver {driver} >= {release.driver}, the driver CUDA {release.cuda} ships with",
            None, _release_source(release), requires,
        )
    if release is None:
        newer = _newer_release_run_by(driver, cuda, tables)
        if newer:
            return Finding(
                "driver", PASS, title, value,
                f"driver {driver} runs CUDA {newer.cuda} (>= {newer.driver}), so it runs the older CUDA {cuda} "
                "too (backward compatibility)",
                None, _release_source(newer), requires,
            )
    if floor is None:
        return Finding(
            "driver", UNKNOWN, title, value,
            f"CUDA {cuda} is not in devenv's tables, so its minimum driver is not known",
            "check the CUDA release notes (Table 3) for the driver it needs", None, requires,
        )

    unlisted = "" if release else f" (CUDA {cuda} is not in devenv's release table; the {cuda.major}.x floor applies)"
    if driver >= floor.driver:
        limits = "; ".join(tables.minor_version_limits)
        full = (f"upgrade the driver to >= {release.driver}, the driver CUDA {cuda} ships with" if release
                else f"upgrade to the driver a CUDA {cuda} (or newer) release ships with")
        return Finding(
            "driver", WARN, title, value,
            f"runs through minor-version compatibility: driver {driver} >= {floor.driver} (CUDA {cuda.major}.x minimum)"
            f"{unlisted}; limits: {limits}",
            f"for full support {full}",
            floor.source + (f"; {_release_source(release)}" if release else ""), requires,
        )
    return _below_floor(driver, cuda, tables, gpu, title, value, floor.driver, release, requires, floor.source)


def _below_floor(driver: DriverVersion, cuda: CudaVersion, tables: Tables, gpu: GpuModel | None, title: str,
                 value: str, floor_driver: DriverVersion, release: ToolkitRelease | None, requires: dict[str, str],
                 floor_source: str) -> Finding:
    target = release.driver if release else floor_driver
    upgrade = f"upgrade the driver to >= {target}"
    if release and release.driver != floor_driver:
        upgrade += f" (the driver CUDA {cuda} ships with; >= {floor_driver} runs it with minor-version limits)"
    reason = f"driver {driver} is below {floor_driver}, the minimum for CUDA {cuda.major}.x"
    sources = [floor_source] + ([_release_source(release)] if release else [])

    package = None
    if cuda.minor is not None:
        package = tables.forward_compat_package.format(major=cuda.major, minor=cuda.minor)
    compat = package or f"the cuda-compat-{cuda.major}-<minor> package"
    support = gpu.forward_compat if gpu else "unknown"
    model = gpu.name if gpu else ""  # said only where support is known, so with a GPU model
    if support == "yes":
        reason += f"; on this data-center GPU ({model}) CUDA {cuda} runs only with {compat} (forward compatibility)"
        remedy = f"{upgrade}, or install {compat} (forward compatibility) where the CUDA libraries load"
    elif support == "maybe":
        reason += (f"; forward compatibility ({compat}) works on {model} boards only for select NGC Server "
                   "Ready SKUs")
        remedy = f"{upgrade} (or {compat}, if this board is an NGC Server Ready SKU)"
    elif support == "no":
        reason += (f"; forward compatibility is not supported on {model} ({tables.forward_compat_error})")
        remedy = upgrade
    else:
        reason += "; the GPU model is not known, so forward compatibility cannot be judged"
        remedy = f"{upgrade}; on an NVIDIA data-center GPU, {compat} (forward compatibility) is an alternative"
    if support != "no" and package:
        requires = {**requires, "cuda_compat_package": package}
        sources.append(tables.forward_compat_source)
    return Finding("driver", FAIL, title, value, reason, remedy, "; ".join(sources), requires)
