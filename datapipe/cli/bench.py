"""`datapipe bench`: the loader's samples/s on a DATASET, or with --suite, datapipe against
its peers (`datapipe.bench`)."""

from __future__ import annotations

import sys
from typing import Any

import click

from datapipe.cli.common import CONTEXT, cache_options
from datapipe.errors import ArgumentError

SUITE_ONLY = ("repeats", "photos", "text_mb", "out", "smoke", "readme")
SINGLE_ONLY = ("batch_size", "decode", "crop", "epochs", "batches", "ceiling", "verify", "device",
               "cache_dir", "cache_size")


@click.command("bench", context_settings=CONTEXT)
@click.argument("dataset", required=False)
@click.option("--suite", type=click.Choice(["images", "text", "convert", "gpu", "all"]),
              help="Instead of one DATASET: datapipe and every installed peer side by side "
              "(benchmarks/ of a checkout), written to --out as Markdown, JSON and charts.")
@click.option("--batch-size", default=256, show_default=True, type=click.IntRange(min=1))
@click.option("--workers", default=0, type=click.IntRange(min=0),
              help="Worker processes (every tool, with --suite); 0 = all cores.")
@click.option("--decode", type=click.Choice(["cpu", "dali"]), default="cpu", show_default=True)
@click.option("--device", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True,
              help="Where batches are delivered; cuda: by the loader's own copy to the GPU.")
@click.option("--crop", default=224, show_default=True, type=click.IntRange(min=1),
              help="RandomResizedCrop size (with a random horizontal flip).")
@click.option("--epochs", default=2, show_default=True, type=click.IntRange(min=1))
@click.option("--batches", default=0, type=click.IntRange(min=0),
              help="Time this many batches (after the first), over as many epochs as that "
              "takes, instead of whole --epochs: a quick figure on a large dataset.")
@click.option("--ceiling", is_flag=True,
              help="Also measure plain decode of every stored image on all workers (with "
              "--batches, of as many as the loader delivered).")
@click.option("--verify", type=click.Choice(["cheap", "open"]), default="cheap",
              show_default=True, help="The loader's checks: 'open' also hashes every shard "
              "against the manifest at start-up (counted in the first batch's time).")
@click.option("--repeats", default=3, show_default=True, type=click.IntRange(min=1),
              help="--suite: runs per tool; median and spread are reported.")
@click.option("--photos", default=2000, show_default=True, type=click.IntRange(min=1),
              help="--suite: photos generated for the image and conversion suites.")
@click.option("--text-mb", default=20, show_default=True, type=click.IntRange(min=1),
              help="--suite: MB of generated text for the text and conversion suites.")
@click.option("--out", default="bench-results", show_default=True,
              type=click.Path(file_okay=False), help="--suite: where results are written.")
@click.option("--smoke", is_flag=True,
              help="--suite: tiny data, one run per tool (a check that everything runs).")
@click.option("--readme", is_flag=True,
              help="--suite: also rewrite README.md's benchmark region and docs/bench/*.png.")
@cache_options
@click.pass_context
def bench(ctx: click.Context, dataset: str | None, suite: str | None, workers: int,
              **options: Any) -> None:
    """Measure the loader's samples/s on DATASET (a folder or a URL), or with --suite,
    datapipe against its peers."""
    given = {name for name in (*SUITE_ONLY, *SINGLE_ONLY)
             if ctx.get_parameter_source(name) is not click.core.ParameterSource.DEFAULT}
    if (dataset is None) == (suite is None):
        raise ArgumentError("bench: give a DATASET or --suite, not both" if dataset else
                            "bench: give a DATASET to measure, or --suite")
    wrong = sorted(given & set(SINGLE_ONLY if suite else SUITE_ONLY))
    if wrong:
        flags = ", ".join("--" + name.replace("_", "-") for name in wrong)
        raise ArgumentError(f"bench: {flags} " + ("apply to a DATASET, not to --suite" if suite
                                                   else "apply only with --suite"))
    if suite:
        from datapipe.bench import run_suite

        sys.exit(run_suite(suite, workers=workers, **{k: options[k] for k in SUITE_ONLY}))
    _bench_dataset(dataset, workers, **{k: options[k] for k in SINGLE_ONLY})


def _bench_dataset(dataset: str, workers: int, batch_size: int, decode: str, crop: int,
                   epochs: int, batches: int, ceiling: bool, verify: str, device: str,
                   cache_dir: str | None, cache_size: str | None) -> None:
    from datapipe.bench import bench_loader, ceiling_decoder, decode_ceiling
    from datapipe.format.sources import resolve_location
    from datapipe.system import available_cores

    dataset = resolve_location(dataset, cache_dir, cache_size)
    workers = workers or available_cores()
    result = bench_loader(dataset, batch_size=batch_size, num_workers=workers, decode=decode,
                          crop=crop, epochs=epochs, batches=batches, verify=verify,
                          device=device)
    if result.batches == 0:  # the clock starts after the first batch
        raise ArgumentError(f"{dataset}: {epochs} epoch(s) of batch {batch_size} make at "
                            "most one batch, and the clock starts after the first; give more "
                            "--epochs or a smaller --batch-size")
    click.echo(f"{result.samples_per_second:,.0f} samples/s ({result.samples:,} samples in "
               f"{result.batches} batches, {result.seconds:.2f} s; first batch after "
               f"{result.first_batch_seconds:.2f} s) with decode={decode}, device={device}, "
               f"{workers} workers, batch {batch_size}, RandomResizedCrop({crop}) + flip, "
               f"verify={verify}")
    if ceiling:
        # With --batches, the ceiling decodes as many images as the loader delivered.
        top = decode_ceiling(dataset, workers, limit=(batches + 1) * batch_size or None)
        click.echo(f"decode-only ceiling: {top:,.0f} images/s on {workers} processes "
                   f"(full decode, {ceiling_decoder()}); loader at "
                   f"{result.samples_per_second / top:.2f} of it")
