"""`datapipe bench`: one loader on a DATASET, or with --suite, datapipe against its peers.

The two forms share a name but no options besides --workers, so each is a command of its own
with its own --help; `bench` hands the command line to the form it is written in and refuses
an option of the other form in one line.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from datapipe.cli.common import CONTEXT, cache_options
from datapipe.errors import ArgumentError
from datapipe.wording import plural

SUITES = ("images", "text", "convert", "gpu", "mixture", "patches", "scale", "all")


@click.command("bench", context_settings=CONTEXT)
@click.argument("dataset")
@click.option("--batch-size", default=256, show_default=True, type=click.IntRange(min=1))
@click.option("--workers", default=0, type=click.IntRange(min=0),
              help="Worker processes; 0 = all cores.")
@click.option("--decode", type=click.Choice(["cpu", "dali"]), default="cpu", show_default=True)
@click.option("--device", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True,
              help="Where batches are delivered; cuda: by the loader's own copy to the GPU.")
@click.option("--crop", default=224, show_default=True, type=click.IntRange(min=1),
              help="RandomResizedCrop size (with a random horizontal flip).")
@click.option("--epochs", default=2, show_default=True, type=click.IntRange(min=1))
@click.option("--batches", default=0, type=click.IntRange(min=0),
              help="Time this many batches (after one a worker), over as many epochs as that "
              "takes, instead of whole --epochs: a quick figure on a large dataset (at least "
              "20 batches and 2 s are timed).")
@click.option("--ceiling", is_flag=True,
              help="Also measure the ceiling: the loader's own decode of the same crops on as "
              "many processes, with no batches or hand-off, over the images the loader went "
              "through.")
@click.option("--verify", type=click.Choice(["cheap", "open"]), default="cheap",
              show_default=True, help="The loader's checks: 'open' also hashes every shard "
              "against the manifest at start-up (counted in the first batch's time).")
@cache_options
def bench_dataset(dataset: str, batch_size: int, workers: int, decode: str, device: str,
                  crop: int, epochs: int, batches: int, ceiling: bool, verify: str,
                  cache_dir: str | None, cache_size: str | None) -> None:
    """Measure the loader's samples/s on DATASET (a folder or a URL such as
    s3://bucket/prefix), the clock started once each worker has delivered a batch; past
    --epochs or --batches it runs on until at least 20 batches and 2 s are timed."""
    from datapipe.bench import MIN_TIMED_BATCHES, MIN_TIMED_SECONDS, bench_loader
    from datapipe.format.sources import resolve_location
    from datapipe.system import available_cores

    location = resolve_location(dataset, cache_dir, cache_size)
    workers = workers or available_cores()
    result = bench_loader(location, batch_size=batch_size, num_workers=workers, decode=decode,
                          crop=crop, epochs=epochs, batches=batches, verify=verify,
                          device=device)
    if result.batches == 0:  # epochs that deliver nothing: the run stopped
        raise ArgumentError(f"{location}: the loader delivered no batch to time")
    untimed = plural(result.warmup_batches, "batch", "batches")
    click.echo(f"{result.samples_per_second:,.0f} samples/s ({plural(result.samples, 'sample')} "
               f"in {plural(result.batches, 'batch', 'batches')}, {result.seconds:.2f} s, over "
               f"{plural(result.epochs, 'epoch')}; first batch after "
               f"{result.first_batch_seconds:.2f} s, the first {untimed} (one a worker) "
               f"untimed) with decode={decode}, device={device}, {plural(workers, 'worker')}, "
               f"batch {batch_size}, RandomResizedCrop({crop}) + flip, verify={verify}")
    if result.asked:
        asked = plural(batches, "batch", "batches") if batches else plural(epochs, "epoch")
        timed, seconds = result.asked
        click.echo(f"  the {asked} asked for timed {plural(timed, 'batch', 'batches')} in "
                   f"{seconds:.2f} s, too little for a steady figure: the loader ran on to time "
                   f"at least {MIN_TIMED_BATCHES} batches and {MIN_TIMED_SECONDS:g} s")
    if ceiling:
        _echo_ceiling(location, workers, crop, result, batch_size, decode)


def _echo_ceiling(location: str, workers: int, crop: int, result: Any, batch_size: int,
                  decode: str) -> None:
    """The decode ceiling of the same work, over the images the loader went through (its
    first batch's included)."""
    from datapipe.bench import ceiling_decoder, crop_ceiling

    top = crop_ceiling(location, workers, crop,
                       limit=result.samples + result.warmup_batches * batch_size)
    ratio = result.samples_per_second / top.images_per_second
    # The ceiling does part of the loader's work: the loader above it is timing noise.
    level = ("; above a ceiling that does less work than the loader, so timing noise (other "
             "work on the machine during one of the two runs): run again on a quiet machine"
             if ratio > 1 else "")
    if decode != "cpu":  # another decoder: the CPU's ceiling bounds decode="cpu" only
        level = f" (decode={decode} does not decode on these processes: the ceiling bounds " \
                "decode=cpu)"
    click.echo(f"decode ceiling: {top.images_per_second:,.0f} images/s "
               f"({plural(top.images, 'image')} in {top.seconds:.2f} s on "
               f"{plural(workers, 'process', 'processes')}: the loader's own "
               f"RandomResizedCrop({crop}) + flip decode with {ceiling_decoder()}, no batches "
               f"or hand-off); loader at {ratio:.2f} of it{level}")


@click.command("bench", context_settings=CONTEXT,
               options_metavar=f"--suite [{'|'.join(SUITES)}] [OPTIONS]")
@click.option("--suite", type=click.Choice(SUITES), required=True,
              help="Which suite: datapipe and every installed peer side by side on generated "
              "data; all: every suite but scale (start-up and memory against corpus size).")
@click.option("--workers", default=0, type=click.IntRange(min=0),
              help="Worker processes of every tool; 0 = all cores.")
@click.option("--repeats", default=3, show_default=True, type=click.IntRange(min=1),
              help="Runs per tool; median and spread are reported.")
@click.option("--photos", default=2000, show_default=True, type=click.IntRange(min=1),
              help="Photos generated for the image, conversion, mixture and patches suites.")
@click.option("--text-mb", default=20, show_default=True, type=click.IntRange(min=1),
              help="MB of generated text for the text, conversion and mixture suites.")
@click.option("--skip", default="", metavar="NAMES",
              help="Comma-separated tools not to run, e.g. dali,ffcv (images:torch: in one "
              "suite's group only).")
@click.option("--out", default="bench-results", show_default=True,
              type=click.Path(file_okay=False), help="Where results are written.")
@click.option("--data", default="bench-data", show_default=True,
              type=click.Path(file_okay=False),
              help="Where generated inputs and converted forms are kept for later runs.")
@click.option("--scale-max", default=10**8, show_default=True, type=int,
              help="The scale suite's largest corpus: its documents (a power of ten from "
              "100000); images stop at 10000000.")
@click.option("--before", type=click.Path(file_okay=False, exists=True),
              help="Another datapipe checkout (built): datapipe's own tools also run from it, "
              "in the same rounds, as '... (--before)'.")
@click.option("--smoke", is_flag=True,
              help="Tiny data, one run per tool (a check that everything runs).")
@click.option("--readme", is_flag=True,
              help="Also rewrite the benchmark region of README.md in this folder, and "
              "docs/bench/*.png beside it.")
def bench_suite(suite: str, workers: int, repeats: int, photos: int, text_mb: int, skip: str,
                out: str, data: str, scale_max: int, before: str | None, smoke: bool,
                readme: bool) -> None:
    """Run datapipe against its peers, written to --out as Markdown, JSON and charts."""
    from datapipe.suite import ALL_SUITES, Options, parse_skip, run

    suites = ALL_SUITES if suite == "all" else (suite,)
    more = {"skip": parse_skip(skip), "before": Path(before) if before else None,
            "readme": Path("README.md") if readme else None, "scale_max": scale_max}
    if smoke:
        options = Options.smoke_test(suites, Path(out), workers or 2, Path(data), **more)
    else:
        options = Options(suites, repeats, photos, text_mb, workers, Path(out), Path(data),
                          **more)
    sys.exit(run(options))


# The forms, each with a phrase for an option given to the other one.
FORMS = ((bench_dataset, "apply to a DATASET, not to --suite"),
         (bench_suite, "apply only with --suite"))


class BenchCommand(click.Command):
    """`bench`: the form the command line is written in parses and runs it; `bench --help`
    shows both."""

    def make_context(self, info_name: str | None, args: list[str],
                     parent: click.Context | None = None, **extra: Any) -> click.Context:
        form = self._form(info_name, args, parent)
        if form is self:
            return super().make_context(info_name, args, parent, **extra)
        return form.make_context(info_name, args, parent, **extra)

    def _form(self, info_name: str | None, args: list[str],
              parent: click.Context | None) -> click.Command:
        given, positional, wants_help = _read(info_name, args, parent)
        if wants_help:
            return bench_suite if "suite" in given else bench_dataset if positional else self
        if "suite" in given and positional:
            raise ArgumentError("bench: give a DATASET or --suite, not both")
        if "suite" not in given and not positional:
            raise ArgumentError("bench: give a DATASET to measure, or --suite")
        form = bench_suite if "suite" in given else bench_dataset
        own = {p.name for p in form.params}
        for other, phrase in FORMS:
            wrong = sorted(p.opts[0] for p in other.params if p.name in given - own)
            if wrong:
                raise ArgumentError(f"bench: {', '.join(wrong)} {phrase}")
        return form

    def format_usage(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        for prefix, (form, _) in zip(("Usage: ", "       "), FORMS, strict=True):
            formatter.write_usage(ctx.command_path, " ".join(form.collect_usage_pieces(ctx)),
                                  prefix)

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        for title, (form, _) in zip(("Options with a DATASET", "Options with --suite"), FORMS,
                                    strict=True):
            records = [p.get_help_record(ctx) for p in form.params if isinstance(p, click.Option)]
            with formatter.section(title):
                formatter.write_dl([r for r in records if r])
        with formatter.section("Options"):
            formatter.write_dl([r for p in self.get_params(ctx) if (r := p.get_help_record(ctx))])


def _read(info_name: str | None, args: list[str],
          parent: click.Context | None) -> tuple[set[str], list[str], bool]:
    """The names of the options ARGS give, its positional arguments, and whether it asks for
    help, read with every form's options (their values are checked by the form that runs)."""
    params: dict[str, click.Parameter] = {}
    for form, _ in FORMS:
        params.update({p.name: p for p in form.params if p.name and isinstance(p, click.Option)})
    probe = click.Command(info_name, params=list(params.values()))
    ctx = click.Context(probe, info_name=info_name, parent=parent, **CONTEXT)
    opts, positional, _ = probe.make_parser(ctx).parse_args(list(args))
    help_option = probe.get_help_option(ctx)
    return set(opts), positional, help_option is not None and help_option.name in opts


bench = BenchCommand(
    "bench", context_settings=CONTEXT,
    short_help="Measure the loader on DATASET, or with --suite, datapipe against its peers.",
    help="Measure the loader's samples/s on DATASET (a folder or a URL), or with --suite, "
    "datapipe against its peers. Each form takes only its own options; "
    "'datapipe bench DATASET --help' and 'datapipe bench --suite all --help' show one form.")
