"""The `datapipe` command: its subcommands in one group, and user mistakes as one line."""

from __future__ import annotations

import sys

import click

from datapipe.cli.bench import bench
from datapipe.cli.common import CONTEXT
from datapipe.cli.convert import convert
from datapipe.cli.doctor import doctor_cmd
from datapipe.cli.inspect import inspect_cmd
from datapipe.cli.profile import profile_cmd
from datapipe.cli.verify import verify_cmd
from datapipe.errors import ArgumentError, DatapipeError


@click.group(context_settings=CONTEXT)
@click.version_option(package_name="datapipe")
def cli() -> None:
    """datapipe: convert data once into shards, load them fast, and see where time goes."""


for command in (convert, inspect_cmd, verify_cmd, bench, profile_cmd, doctor_cmd):
    cli.add_command(command)


def main(argv: list[str] | None = None) -> None:
    """Entry point: user mistakes become one line on stderr and exit status 2 (1 for data)."""
    try:
        cli.main(args=argv, prog_name="datapipe", standalone_mode=False)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.UsageError as exc:
        hint = f" (see '{exc.ctx.command_path} --help')" if exc.ctx else ""
        click.echo(f"datapipe: error: {exc.format_message()}{hint}", err=True)
        sys.exit(2)
    except click.Abort:
        click.echo("datapipe: interrupted", err=True)
        sys.exit(130)
    except DatapipeError as exc:
        click.echo(f"datapipe: error: {exc}", err=True)
        sys.exit(2 if isinstance(exc, ArgumentError) else 1)
