"""`datapipe inspect`: a dataset's summary (`datapipe.inspection.summarize`) for a terminal."""

from __future__ import annotations

import json

import click

from datapipe.cli.common import CONTEXT, cache_options
from datapipe.sizes import format_size
from datapipe.wording import plural

BARS_SHOWN = 50


@click.command("inspect", context_settings=CONTEXT)
@click.argument("dataset")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@cache_options
def inspect_cmd(dataset: str, as_json: bool, cache_dir: str | None,
                cache_size: str | None) -> None:
    """Summarize a dataset (a folder or a URL such as s3://bucket/prefix): samples, shards,
    bytes, schema, label or length histogram."""
    from datapipe.format.sources import resolve_location
    from datapipe.inspection import length_histogram, summarize

    location = resolve_location(dataset, cache_dir, cache_size)
    summary = summarize(location)
    if as_json:
        click.echo(json.dumps(summary, indent=1))
        return
    click.echo(f"{summary['path']}: {summary['kind']} dataset, "
               f"{plural(summary['samples'], 'sample')} in "
               f"{plural(summary['shards'], summary['format'] + ' shard')}, "
               f"{format_size(summary['bytes'])}; {plural(summary['rejected'], 'input')} "
               "rejected")
    click.echo("columns: " + ", ".join(f"{k} ({v})" for k, v in summary["columns"].items()))
    if "tokenizer" in summary:
        t = summary["tokenizer"]
        click.echo(f"tokenizer: {t['name']} ({t['kind']}, vocab {t['vocab_size']:,}, "
                   f"eos {t['eos_id']})")
    if "lengths" in summary and summary["lengths"].get("count"):
        s = summary["lengths"]
        click.echo(f"tokens: {s['total']:,}; length min {s['min']} p50 {s['p50']:.0f} "
                   f"p95 {s['p95']:.0f} max {s['max']}")
        click.echo(_bars(length_histogram(location), "lengths"))
    if "image_size" in summary:
        h, w = summary["image_size"]["height"], summary["image_size"]["width"]
        click.echo(f"stored size: height {h['min']}..{h['max']} (p50 {h['p50']:.0f}), "
                   f"width {w['min']}..{w['max']} (p50 {w['p50']:.0f})")
    if "labels" in summary:
        click.echo(_bars(summary["labels"], "labels"))


def _bars(counts: dict[str, int], title: str, width: int = 40) -> str:
    top = max(counts.values(), default=1)
    name_width = min(24, max((len(k) for k in counts), default=1))
    lines = [f"{title}:"]
    for name, count in list(counts.items())[:BARS_SHOWN]:
        lines.append(f"  {name[:name_width]:>{name_width}} {count:>9,} "
                     + "#" * max(1, round(width * count / top)))
    if len(counts) > BARS_SHOWN:
        lines.append(f"  ... and {len(counts) - BARS_SHOWN} more")
    return "\n".join(lines)
