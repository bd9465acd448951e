"""The `datapipe` command: convert, inspect, verify, doctor."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click

from datapipe.errors import ArgumentError, DatapipeError
from datapipe.sizes import format_size

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


class _Progress:
    """A tqdm bar on a terminal; silent otherwise (the summary line says it all)."""

    def __init__(self, total: int | None, unit: str) -> None:
        self.bar = None
        if sys.stderr.isatty():
            from tqdm import tqdm

            self.bar = tqdm(total=total, unit=unit, dynamic_ncols=True, smoothing=0.1)

    def update_to(self, done: int, *_: Any) -> None:
        if self.bar is not None:
            self.bar.update(done - self.bar.n)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


@click.group(context_settings=CONTEXT)
@click.version_option(package_name="datapipe")
def cli() -> None:
    """datapipe: convert data once into shards, load them fast, and see where time goes."""


@cli.group()
def convert() -> None:
    """Convert raw images or text into shards (heavy, non-random work done once)."""


def _output_options(func: Any) -> Any:
    from datapipe.format.shard_formats import FORMAT_NAMES

    options = [
        click.option("--format", "shard_format", type=click.Choice(FORMAT_NAMES),
                     default="arrow", show_default=True, help="Shard file format."),
        click.option("--shard-size", default="256MB", show_default=True,
                     help="Target shard size; samples are never split across shards."),
        click.option("--overwrite", is_flag=True, help="Replace a dataset already in OUT."),
        click.option("--strict", is_flag=True,
                     help="Fail on the first bad input instead of listing it in rejects.jsonl."),
        click.option("--max-rejects", default=None, metavar="N|FRACTION",
                     help="Fail the run (exit 1) when more inputs than this are rejected: a "
                     "count, or a fraction of the inputs such as 0.01. What was converted is "
                     "kept, not published as a dataset; the same command with a higher limit "
                     "finishes it. A run that converts nothing always fails. [default: no "
                     "limit]"),
        click.option("--staging", type=click.Path(path_type=Path), default=None,
                     help="For an OUT that is a URL (s3://bucket/prefix): the local folder "
                     "shards are made in before upload [default: a folder per URL under "
                     "$DATAPIPE_CACHE_DIR/staging, else ~/.cache/datapipe/staging]."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def _engine_options(func: Any) -> Any:
    options = [
        click.option("--engine", type=click.Choice(["local", "ray"]), default="local",
                     show_default=True, help="Where the work runs: processes on this machine, "
                     "or tasks on a Ray cluster (needs: pip install 'datapipe[ray]'). The "
                     "output is the same."),
        click.option("--address", default=None, metavar="ADDR",
                     help="With --engine ray: the cluster (HOST:PORT, ray://HOST:PORT or auto; "
                     "default: RAY_ADDRESS, else a Ray instance started on this machine)."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


@contextlib.contextmanager
def _engine(name: str, workers: int, address: str | None) -> Iterator[Any]:
    """The engine the options name, given back however the command ends."""
    from datapipe.system import available_cores
    from preprocess.engine import make_engine

    if workers < 0:
        raise click.BadParameter(f"must be >= 0, got {workers}", param_hint="--workers")
    # 0 workers: every core here, or every CPU of the Ray cluster.
    engine = make_engine(name, workers or (available_cores() if name == "local" else 0),
                         address)
    try:
        yield engine
    finally:
        engine.close()


def _make_output_options(out: str, shard_format: str, shard_size: str, overwrite: bool,
                         strict: bool, staging: Path | None, max_rejects: str | None) -> Any:
    from datapipe.format.remote import is_url, local_path
    from preprocess.output import OutputOptions, parse_size
    from preprocess.reject_limit import RejectLimit

    limit = None if max_rejects is None else RejectLimit.parse(max_rejects)
    return OutputOptions(out=out if is_url(out) else local_path(out), shard_format=shard_format,
                         shard_size=parse_size(shard_size), overwrite=overwrite, strict=strict,
                         staging=staging, max_rejects=limit)


def _report(result: Any, noun: str, rate: str) -> None:
    from preprocess.reject_limit import reject_share

    m, rejected = result.manifest, len(result.rejects)
    resumed = f", {result.resumed_shards} kept from the interrupted run" if \
        result.resumed_shards else ""
    click.echo(f"converted {m.num_samples:,} {noun} of {result.inputs:,} inputs ({rejected:,} "
               f"rejected, {reject_share(rejected, result.inputs)}) into {len(m.shards)} shards "
               f"({format_size(m.total_bytes)}) in {result.seconds:.1f} s, {rate}{resumed}")
    if result.rejects:
        click.echo(f"rejected {len(result.rejects):,} inputs, listed with reasons in "
                   f"{_join(result.out, 'rejects.jsonl')}")


def _cache_options(func: Any) -> Any:
    options = [
        click.option("--cache-dir", default=None, help="Where shards of a URL dataset are "
                     "cached on this node [default: $DATAPIPE_CACHE_DIR, else "
                     "~/.cache/datapipe]."),
        click.option("--cache-size", default=None, help="Most bytes the cache may hold, e.g. "
                     "200GB; least recently used shards go first [default: "
                     "$DATAPIPE_CACHE_SIZE, else 100GB]."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def _location(dataset: str, cache_dir: str | None = None, cache_size: str | None = None) -> Any:
    """A local path, or a URL with its cache settings."""
    from datapipe.format.sources import resolve_location

    return resolve_location(dataset, cache_dir, cache_size)


def _join(location: Any, name: str) -> str:
    return f"{str(location).rstrip('/')}/{name}"


@convert.command("images", context_settings=CONTEXT)
@click.argument("src", type=click.Path(path_type=Path))
@click.argument("out")
@click.option("--short-side", default=256, show_default=True, type=int,
              help="Resize so the shorter side is this many pixels (of the image as displayed, "
              "after its EXIF orientation); the longer side is the full-resolution one scaled "
              "alike and rounded to the nearest pixel, halves up. 0 keeps the size.")
@click.option("--upscale/--no-upscale", default=True, show_default=True,
              help="Enlarge an image whose shorter side is below --short-side, as "
              "torchvision's Resize does; --no-upscale stores it at its own size.")
@click.option("--quality", default=90, show_default=True, type=int, help="JPEG quality.")
@click.option("--subsampling", type=click.Choice(["4:4:4", "4:2:2", "4:2:0"]),
              default="4:2:0", show_default=True,
              help="JPEG chroma subsampling: 4:4:4 keeps colour edges sharp, at about 1.25x "
              "the bytes of 4:2:0 on photos; 4:2:2 halves colour detail across only.")
@click.option("--keep-icc", is_flag=True,
              help="Store RGB values as the file holds them, with its ICC profile embedded, "
              "instead of converting them to sRGB (the default). JPEG encoding only.")
@click.option("--encoding", type=click.Choice(["jpeg", "raw"]), default="jpeg",
              show_default=True, help="Store JPEG, or raw uint8 RGB pixels (no decode at load).")
@click.option("--max-pixels", default=89_478_485, show_default=True, type=int,  # PIL's limit
              help="Reject an image whose stored or resized size (width x height) is over this "
              "many pixels, judged from its header before decoding; the default is PIL's "
              "decompression-bomb limit.")
@click.option("--workers", default=0, type=int,
              help="Processes (Ray: tasks at once); 0 = all cores (Ray: all the cluster's).")
@_engine_options
@_output_options
def convert_images_cmd(src: Path, out: str, short_side: int, upscale: bool, quality: int,
                       subsampling: str, keep_icc: bool, encoding: str, max_pixels: int,
                       workers: int, engine: str, address: str | None, **output: Any) -> None:
    """Convert an image folder (SRC/<class>/<file>) or a CSV/JSONL list (path,label,...)
    into OUT, a folder or a URL (s3://bucket/prefix: made locally, then uploaded).

    Every input is converted or listed in OUT/rejects.jsonl with a reason: symlinks are
    followed, each folder walked once (a dangling or looping link is a reject), hidden entries
    ('.' names), folders that cannot be read and entries on /proc, /sys or /dev are rejects,
    and so is any file that is not an image. OUT and other datapipe datasets are not inputs.
    A run that converts nothing, or rejects more than --max-rejects, exits 1.

    Stored images are RGB in sRGB: an embedded ICC profile (Adobe RGB, Display P3, ...) is
    converted, transparency is composited onto white, 16-bit values are scaled by bit depth.
    """
    from preprocess.image_ops import ImageSettings
    from preprocess.images import convert_images

    settings = ImageSettings(short_side=short_side, quality=quality, encoding=encoding,
                             max_pixels=max_pixels, subsampling=subsampling, upscale=upscale,
                             keep_icc=keep_icc)
    options = _make_output_options(out, **output)
    with _engine(engine, workers, address) as runner:
        progress = _Progress(None, "img")
        try:
            result = convert_images(
                src, options, settings, runner.workers, engine=runner,
                progress=lambda done, total: _bar_total(progress, done, total))
        finally:
            progress.close()
    rate = result.inputs - _resumed_inputs(result)
    _report(result, "images", f"{rate / max(result.seconds, 1e-9):,.0f} images/s")


def _bar_total(progress: _Progress, done: int, total: int) -> None:
    if progress.bar is not None and progress.bar.total is None:
        progress.bar.reset(total=total)
    progress.update_to(done)


def _resumed_inputs(result: Any) -> int:
    return sum(s.rows for s in result.manifest.shards[:result.resumed_shards])


@convert.command("text", context_settings=CONTEXT)
@click.argument("sources", nargs=-1, required=True, metavar="SRC... OUT")
@click.option("--tokenizer", "tokenizer", required=True,
              help="Path to a Hugging Face tokenizer.json, or 'bytes' (built-in byte-level).")
@click.option("--field", default="text", show_default=True, help="Text field of .jsonl/.parquet.")
@click.option("--doc-per-file", is_flag=True, help=".txt files hold one document each.")
@click.option("--append-eos", is_flag=True, help="End every document with the EOS id.")
@click.option("--eos-token", default=None, help="Which token is EOS (default: found by name).")
@click.option("--workers", default=0, type=int,
              help="Processes (Ray: tasks at once); 0 = all cores (Ray: all the cluster's).")
@_engine_options
@_output_options
def convert_text_cmd(sources: tuple[str, ...], tokenizer: str, field: str, doc_per_file: bool,
                     append_eos: bool, eos_token: str | None, workers: int, engine: str,
                     address: str | None, **output: Any) -> None:
    """Tokenize .txt (a line or a file per document), .jsonl or .parquet into id arrays, in
    OUT: a folder or a URL (s3://bucket/prefix: made locally, then uploaded)."""
    from preprocess.text import convert_text
    from preprocess.text_sources import TextOptions

    if len(sources) < 2:
        raise click.UsageError("give at least one SRC and then OUT")
    *srcs, out = sources
    options = _make_output_options(out, **output)
    with _engine(engine, workers, address) as runner:
        progress = _Progress(None, "doc")
        try:
            result = convert_text([Path(s) for s in srcs], options, tokenizer,
                                  TextOptions(field, doc_per_file), append_eos=append_eos,
                                  eos_token=eos_token, engine=runner,
                                  progress=progress.update_to)
        finally:
            progress.close()
    tokens = result.extra["tokens_this_run"]
    _report(result, "documents", f"{tokens:,} tokens, "
            f"{tokens / max(result.seconds, 1e-9):,.0f} tokens/s")


@cli.command("inspect", context_settings=CONTEXT)
@click.argument("dataset")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@_cache_options
def inspect_cmd(dataset: str, as_json: bool, cache_dir: str | None,
                cache_size: str | None) -> None:
    """Summarize a dataset (a folder or a URL such as s3://bucket/prefix): samples, shards,
    bytes, schema, label or length histogram."""
    from datapipe.inspection import summarize

    location = _location(dataset, cache_dir, cache_size)
    summary = summarize(location)
    if as_json:
        click.echo(json.dumps(summary, indent=1))
        return
    click.echo(f"{summary['path']}: {summary['kind']} dataset, {summary['samples']:,} samples in "
               f"{summary['shards']} {summary['format']} shards, "
               f"{format_size(summary['bytes'])}; {summary['rejected']} inputs rejected")
    click.echo("columns: " + ", ".join(f"{k} ({v})" for k, v in summary["columns"].items()))
    if "tokenizer" in summary:
        t = summary["tokenizer"]
        click.echo(f"tokenizer: {t['name']} ({t['kind']}, vocab {t['vocab_size']:,}, "
                   f"eos {t['eos_id']})")
    if "lengths" in summary and summary["lengths"].get("count"):
        s = summary["lengths"]
        click.echo(f"tokens: {s['total']:,}; length min {s['min']} p50 {s['p50']:.0f} "
                   f"p95 {s['p95']:.0f} max {s['max']}")
        click.echo(_length_histogram(location))
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
    for name, count in list(counts.items())[:50]:
        lines.append(f"  {name[:name_width]:>{name_width}} {count:>9,} "
                     + "#" * max(1, round(width * count / top)))
    if len(counts) > 50:
        lines.append(f"  ... and {len(counts) - 50} more")
    return "\n".join(lines)


def _length_histogram(dataset: Any) -> str:
    import numpy as np

    from datapipe.format.dataset import Dataset

    with Dataset(dataset) as ds:
        lengths = ds.scalar("length")
    edges = np.unique(np.geomspace(max(1, lengths.min()), lengths.max() + 1, 11).astype(int))
    counts, _ = np.histogram(lengths, bins=edges)
    return _bars({f"{a}-{b - 1}": int(c) for a, b, c in zip(edges, edges[1:], counts,
                                                             strict=False)}, "lengths")


@cli.command("verify", context_settings=CONTEXT)
@click.argument("dataset")
def verify_cmd(dataset: str) -> None:
    """Check a dataset as every reader would: re-hash each shard against the manifest, then
    check what the loaders check (rows, labels against the classes, column types, token ids,
    image sizes); exit 1 naming each bad shard. A URL's shards are hashed as they stream into
    the cache."""
    from datapipe.format.manifest import MANIFEST_NAME
    from datapipe.inspection import verify

    dataset = _location(dataset)
    manifest, problems = verify(dataset)
    for problem in problems:
        click.echo(f"{_join(dataset, problem.name)}: {problem.problem}", err=True)
    if problems:
        bad = sum(p.name != MANIFEST_NAME for p in problems)
        click.echo(f"{dataset}: {bad} of {len(manifest.shards)} shards are corrupt, missing or "
                   "disagree with the manifest" + ("; so does the manifest itself" if
                                                   bad < len(problems) else ""), err=True)
        sys.exit(1)
    click.echo(f"{dataset}: all {len(manifest.shards)} shards intact "
               f"({manifest.num_samples:,} samples)")


SUITE_ONLY = ("repeats", "photos", "text_mb", "out", "smoke", "readme")
SINGLE_ONLY = ("batch_size", "decode", "crop", "epochs", "batches", "ceiling", "verify", "device",
               "cache_dir", "cache_size")


@cli.command("bench", context_settings=CONTEXT)
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
@_cache_options
@click.pass_context
def bench_cmd(ctx: click.Context, dataset: str | None, suite: str | None, workers: int,
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
        sys.exit(_bench_suite(suite, workers, **{k: options[k] for k in SUITE_ONLY}))
    _bench_dataset(dataset, workers, **{k: options[k] for k in SINGLE_ONLY})


def _bench_suite(suite: str, workers: int, repeats: int, photos: int, text_mb: int, out: str,
                 smoke: bool, readme: bool) -> int:
    from datapipe.bench import benchmarks_suite

    if smoke and readme:
        raise ArgumentError("bench: --readme with --smoke would put smoke-test figures in "
                            "the README; run the full suite for it")
    module = benchmarks_suite()
    suites = module.SUITES if suite == "all" else (suite,)
    if smoke:
        opts = module.Options.smoke_test(suites, Path(out), workers or 2)
    else:
        opts = module.Options(suites, repeats, photos, text_mb, workers, Path(out),
                              readme=readme)
    return module.run(opts)


def _bench_dataset(dataset: str, workers: int, batch_size: int, decode: str, crop: int,
                   epochs: int, batches: int, ceiling: bool, verify: str, device: str,
                   cache_dir: str | None, cache_size: str | None) -> None:
    from datapipe.bench import bench_loader, ceiling_decoder, decode_ceiling
    from datapipe.system import available_cores

    dataset = _location(dataset, cache_dir, cache_size)
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


@cli.command("profile", context_settings={**CONTEXT, "ignore_unknown_options": True,
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
    import os

    from datapipe.profiling.auto import (
        ENV_ORACLE,
        ENV_PREFIX,
        ENV_SCALING,
        exit_reason,
        exit_status,
        outputs,
        rank_prefixes,
        text_path,
    )
    from datapipe.profiling.report import withdraw_verdict

    target = Path(prefix).resolve()
    settings, report = outputs(target), text_path(target)
    stale = [report, settings.report, settings.trace, settings.html]
    for other in rank_prefixes(target).values():  # an earlier run's; this one may have fewer
        of_rank = outputs(other)
        stale += [text_path(other), of_rank.report, of_rank.trace, of_rank.html]
    _clear_profile(prefix, stale)
    code = _run_command(command, {**os.environ, ENV_PREFIX: str(target),
                                  ENV_SCALING: "1" if scaling_test else "0",
                                  ENV_ORACLE: "1" if oracle or scaling_test else "0"})
    failed = exit_reason(code)
    text = withdraw_verdict(settings, report, failed) if failed else \
        report.read_text().rstrip() if report.is_file() else None
    if text:
        click.echo(text)
        click.echo(f"files: {prefix}.json, {prefix}.trace.json (open in ui.perfetto.dev), "
                   f"{prefix}.html")
        others = list(rank_prefixes(target))
        if others:
            click.echo(f"other ranks, each its own report: {prefix}.rank{others[0]}.* to "
                       f"{prefix}.rank{others[-1]}.*" if len(others) > 1 else
                       f"the other rank's report: {prefix}.rank{others[0]}.*")
    elif failed:
        click.echo(f"datapipe profile: {failed} before writing a profile; nothing to report",
                   err=True)
    else:
        click.echo("datapipe profile: the command iterated no datapipe loader; nothing to "
                   "report", err=True)
    sys.exit(exit_status(code))


def _clear_profile(prefix: str, files: list[Path]) -> None:
    """Make --out's directory and remove an earlier run's files: they are not this run's."""
    try:
        files[0].parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ArgumentError(f"--out {prefix}: cannot create {files[0].parent}: "
                            f"{exc.strerror}") from None
    for stale in files:
        try:
            stale.unlink(missing_ok=True)
        except OSError as exc:
            raise ArgumentError(f"--out {prefix}: cannot replace {stale}: {exc.strerror}") \
                from None


def _run_command(command: tuple[str, ...], env: dict[str, str]) -> int:
    """The command's exit status (negative: the signal that killed it)."""
    import signal
    import subprocess

    # Ctrl-C reaches the command too: it is the command's to handle, and this process reports
    # how the command ended. (A handler, unlike SIG_IGN, is not inherited by the command.)
    previous = signal.signal(signal.SIGINT, lambda *_: None)
    try:
        return subprocess.call(list(command), env=env)
    except OSError as exc:
        raise click.UsageError(f"cannot run {command[0]!r}: {exc.strerror}") from None
    finally:
        signal.signal(signal.SIGINT, previous)


@cli.command("doctor", context_settings=CONTEXT)
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


if __name__ == "__main__":
    main()
