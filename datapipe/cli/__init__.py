"""The `datapipe` command line: a module per command, each a thin layer over a function that
scripts can call (`preprocess.images.convert_images`, `datapipe.inspection.summarize`,
`datapipe.bench.bench_loader`, `datapipe.profiling.command.profile_command`, ...).

Commands import what they run when they run: `datapipe convert` never loads torch.
"""

from __future__ import annotations

from datapipe.cli.app import cli, main

__all__ = ["cli", "main"]
