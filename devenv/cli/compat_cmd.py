"""`devenv compat`: does this driver + CUDA + GPU + PyTorch build work together? Offline, from devenv's tables."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import click

from devenv.cli import main
from devenv.cli.render import emit_json, print_results
from devenv.compat import (
    CompatInputError,
    CompatReport,
    ComputeCapability,
    CudaVersion,
    DriverVersion,
    TorchBuild,
    judge,
    parse_cc,
    parse_cuda,
    parse_driver,
    parse_torch,
)

_V = TypeVar("_V")
EXIT_RUNS, EXIT_DOES_NOT_RUN, EXIT_UNKNOWN = 0, 1, 3  # 2 is click's code for bad input
EXIT_CODES = {"pass": EXIT_RUNS, "warn": EXIT_RUNS, "fail": EXIT_DOES_NOT_RUN, "unknown": EXIT_UNKNOWN}
_VERDICT = {"pass": ("runs", "green"), "warn": ("runs, with limits", "yellow"),
            "fail": ("does NOT run", "red"), "unknown": ("cannot tell", "magenta")}


def _parsed(parse: Callable[[str], _V]) -> Callable[[click.Context, click.Parameter, str | None], _V | None]:
    """A click callback: parse the option now, so a typo is one clear usage error with a hint."""

    def callback(ctx: click.Context, param: click.Parameter, value: str | None) -> _V | None:
        if value is None:
            return None
        try:
            return parse(value)
        except CompatInputError as exc:
            raise click.BadParameter(f"{exc.message} (hint: {exc.hint})") from None

    return callback


@main.command("compat")
@click.option("--driver", metavar="VER", callback=_parsed(parse_driver),
              help="Host driver version, as nvidia-smi prints it (e.g. 580.159.04).")
@click.option("--cuda", metavar="X.Y", callback=_parsed(parse_cuda),
              help="CUDA toolkit version of the image or host (e.g. 12.8).")
@click.option("--gpu-cc", metavar="M.m", callback=_parsed(parse_cc),
              help="GPU compute capability (nvidia-smi --query-gpu=compute_cap, e.g. 9.0).")
@click.option("--gpu-name", metavar="NAME",
              help="GPU name as nvidia-smi prints it (e.g. 'NVIDIA H200'): gives the compute capability and "
                   "whether forward compatibility is possible.")
@click.option("--torch", "torch_build", metavar="VER+cuXYZ", callback=_parsed(parse_torch),
              help="PyTorch build, torch.__version__ (e.g. 2.8.0+cu128) or just the wheel tag (cu128).")
@click.option("--arch-list", metavar="'sm_80 sm_90 ...'",
              help="torch.cuda.get_arch_list() as read on the host (space or comma separated); "
                   "replaces devenv's table for the --torch build.")
@click.option("--json", "as_json", is_flag=True, help="Print the verdict, findings and remedies as JSON.")
@click.pass_context
def compat(ctx: click.Context, driver: DriverVersion | None, cuda: CudaVersion | None, gpu_cc: ComputeCapability | None,
           gpu_name: str | None, torch_build: TorchBuild | None, arch_list: str | None, as_json: bool) -> None:
    """Tell whether a driver, CUDA version, GPU and PyTorch build work together.

    Judged offline from devenv's cited tables (NVIDIA release notes, PyTorch build scripts);
    anything the tables do not cover is reported as unknown, never guessed.

    \b
    Exit status (also with --json):
      0  it runs (minor-version compatibility or PTX JIT included: the limits are printed)
      1  it does not run (the remedy names the driver, cuda-compat package or PyTorch build needed)
      2  bad input (a value that is not a version)
      3  cannot tell: something is unknown (a warning line says what)

    \b
    Example:
      devenv compat --driver 580.159.04 --cuda 12.8 --gpu-name 'NVIDIA H200' --torch 2.8.0+cu128
    """
    if cuda is None and torch_build is None:
        raise click.UsageError("nothing to judge: give --cuda and/or --torch (and --driver, --gpu-cc/--gpu-name)")
    if arch_list and torch_build is None:
        raise click.UsageError("--arch-list describes a PyTorch build: give --torch too")
    archs = arch_list.replace(",", " ").split() if arch_list else None
    try:
        report = judge(driver=driver, cuda=cuda, gpu_cc=gpu_cc, torch_build=torch_build, gpu_name=gpu_name,
                       torch_arch_list=archs)
    except CompatInputError as exc:  # only --arch-list is parsed this late
        raise click.BadParameter(f"{exc.message} (hint: {exc.hint})", param_hint="'--arch-list'") from None
    if as_json:
        emit_json(report.to_dict())
    else:
        _print_report(report)
    if report.verdict == "unknown":
        click.secho(f"Warning: devenv cannot tell whether this runs: {report.reason}", fg="magenta", err=True)
    ctx.exit(EXIT_CODES[report.verdict])


def _print_report(report: CompatReport) -> None:
    given = [f"{k.replace('_', ' ')} {v}" for k, v in report.inputs.items() if v]
    click.echo("Judging: " + ", ".join(given))
    print_results(f.as_result() for f in report.findings)
    word, color = _VERDICT[report.verdict]
    click.echo(f"Verdict: {click.style(word, fg=color, bold=True)}")
