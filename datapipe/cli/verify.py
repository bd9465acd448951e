"""`datapipe verify`: `datapipe.inspection.verify`, each problem on a line of its own."""

from __future__ import annotations

import sys

import click

from datapipe.cli.common import CONTEXT, join


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
        if bad:
            click.echo(f"{location}: {bad} of {len(manifest.shards)} shards are corrupt, missing "
                       "or disagree with the manifest" + ("; so does the manifest itself" if
                                                          bad < len(problems) else ""), err=True)
        else:
            count = len(manifest.shards)
            click.echo(f"{location}: the manifest is wrong; its {count} shard"
                       f"{'s are' if count != 1 else ' is'} intact", err=True)
        sys.exit(1)
    click.echo(f"{location}: all {len(manifest.shards)} shards intact "
               f"({manifest.num_samples:,} samples)")
