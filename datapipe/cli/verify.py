"""`datapipe verify`: `datapipe.inspection.verify`, each problem on a line of its own."""

from __future__ import annotations

import sys

import click

from datapipe.cli.common import CONTEXT, join
from datapipe.wording import plural


@click.command("verify", context_settings=CONTEXT)
@click.argument("dataset")
def verify_cmd(dataset: str) -> None:
    """Check a dataset as every reader would: re-hash each shard against the manifest, then
    check what the loaders check (rows, labels against the classes, column types, token ids,
    image sizes); exit 1 naming each bad shard. A URL's shards are hashed as they stream into
    the cache."""
    from datapipe.format.manifest import MANIFEST_NAME
    from datapipe.format.sources import resolve_location
    from datapipe.inspection import verify

    location = resolve_location(dataset)
    manifest, problems = verify(location)
    for problem in problems:
        click.echo(f"{join(location, problem.name)}: {problem.problem}", err=True)
    if problems:
        bad = sum(p.name != MANIFEST_NAME for p in problems)
        count = len(manifest.shards)
        if bad:
            are, disagree = ("is", "disagrees") if bad == 1 else ("are", "disagree")
            click.echo(f"{location}: {bad} of {plural(count, 'shard')} {are} corrupt, missing "
                       f"or {disagree} with the manifest" +
                       ("; so does the manifest itself" if bad < len(problems) else ""),
                       err=True)
        else:
            are = "is" if count == 1 else "are"
            click.echo(f"{location}: the manifest is wrong; its {plural(count, 'shard')} {are} "
                       "intact", err=True)
        sys.exit(1)
    every = "the" if len(manifest.shards) == 1 else "all"
    click.echo(f"{location}: {every} {plural(len(manifest.shards), 'shard')} intact "
               f"({plural(manifest.num_samples, 'sample')})")
