"""`datapipe profile -- COMMAND`: `datapipe.profiling.command.profile_command`, its report on
the terminal and the command's exit status passed on."""

from __future__ import annotations

import sys

import click

from datapipe.cli.common import CONTEXT


@click.command("profile", context_settings={**CONTEXT, "ignore_unknown_options": True,
                                            "allow_interspersed_args": False})
@click.option("--out", "prefix", default="datapipe-profile", show_default=True,
              help="Write PREFIX.txt, .json, .trace.json (Chrome/Perfetto) and .html.")
@click.option("--scaling-test", is_flag=True,
              help="Insert a few steps at 2x the batch to tell overhead- from compute-bound.")
@click.option("--oracle", is_flag=True,
              help="Insert a few steps replaying a cached batch (a perfect input pipeline); "
              "the report says whether their speed-up agrees with the measured starvation.")
@click.argument("command", nargs=-1, type=click.UNPROCESSED, required=True)
def profile_cmd(prefix: str, scaling_test: bool, oracle: bool, command: tuple[str, ...]) -> None:
    """Run COMMAND (e.g. -- python train.py ARGS) with its datapipe loaders profiled.

    Where COMMAND uses CUDA, starvation is the GPU's idle time for want of data (CUDA events).
    If COMMAND fails, the report is marked partial, with no verdict, and its exit status is
    passed on (128 + N for a signal).
    """
    from datapipe.profiling.command import profile_command

    result = profile_command(command, prefix, scaling_test=scaling_test, oracle=oracle)
    if result.report:
        click.echo(result.report)
        click.echo(f"files: {prefix}.json, {prefix}.trace.json (open in ui.perfetto.dev), "
                   f"{prefix}.html")
        ranks = result.other_ranks
        if ranks:
            click.echo(f"other ranks, each its own report: {prefix}.rank{ranks[0]}.* to "
                       f"{prefix}.rank{ranks[-1]}.*" if len(ranks) > 1 else
                       f"the other rank's report: {prefix}.rank{ranks[0]}.*")
    elif result.failure:
        click.echo(f"datapipe profile: {result.failure} before writing a profile; nothing to "
                   "report", err=True)
    else:
        click.echo("datapipe profile: the command iterated no datapipe loader; nothing to "
                   "report", err=True)
    sys.exit(result.exit_status)
