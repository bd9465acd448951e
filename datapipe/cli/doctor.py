"""`datapipe doctor`: `datapipe.doctor.environment` for a terminal, with what to fix."""

from __future__ import annotations

from typing import Any

import click

from datapipe.cli.common import CONTEXT


@click.command("doctor", context_settings=CONTEXT)
def doctor_cmd() -> None:
    """Show which PIL build, decoders and devices datapipe will use."""
    from datapipe.doctor import environment

    info = environment()
    pil = info.pop("PIL")
    click.echo(f"PIL: {pil['build']} {pil['version']} (libjpeg-turbo: {pil['libjpeg_turbo']})")
    click.echo("PIL reads: " + ", ".join(f"{name} {'yes' if ok else 'NO'}"
                                         for name, ok in pil["formats"].items()))
    click.echo(f"PIL colour management (LittleCMS): {'yes' if pil['littlecms2'] else 'NO'}")
    for key, value in info.items():
        click.echo(f"{key}: {value}")
    if pil["build"] != "pillow-simd":
        click.echo("warning: PIL is not the pillow-simd build; CPU decode and resize are slower. "
                   "Reinstall with: pip uninstall -y pillow && pip install --force-reinstall "
                   "--no-deps pillow-simd", err=True)
    _warn_missing_codecs(pil)
    from datapipe.image.cpu_decode import EXTENSION_ACTIVE, SLOW_PATH_WARNING

    if not EXTENSION_ACTIVE:
        click.echo(f"warning: {SLOW_PATH_WARNING}", err=True)


def _warn_missing_codecs(pil: dict[str, Any]) -> None:
    from datapipe.doctor import missing_support

    missing = missing_support(pil)
    if missing:
        packages = " ".join(sorted(set(missing.values())))
        click.echo(f"warning: this PIL build cannot read {', '.join(missing)}: it was built "
                   f"without the headers of {packages} (Debian packages); install them and "
                   "rerun `bash tools/setup.sh`, which rebuilds pillow-simd", err=True)
