"""`datapipe convert images|text`: raw inputs into shards, over the converters of
`preprocess`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from datapipe.cli.common import CONTEXT, Progress, join
from datapipe.cli.convert_options import (
    caption_options,
    engine_options,
    make_caption_options,
    make_output_options,
    open_engine,
    output_options,
    sft_options,
    source_options,
)
from datapipe.sizes import format_size
from datapipe.wording import plural


@click.group(context_settings=CONTEXT)
def convert() -> None:
    """Convert raw images or text into shards (heavy, non-random work done once)."""


@convert.command("images", context_settings=CONTEXT)
@click.argument("sources", nargs=-1, required=True, metavar="SRC... OUT")
@source_options
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
@caption_options
@engine_options
@output_options
def convert_images_cmd(sources: tuple[str, ...], src_kind: str, image_field: str | None,
                       label_field: str | None, short_side: int, upscale: bool, quality: int,
                       subsampling: str, keep_icc: bool, encoding: str, max_pixels: int,
                       tokenizer: str | None, caption_field: str | None,
                       caption_max_tokens: int | None, keep_caption_text: bool,
                       empty_caption: str, caption_id_type: str | None,
                       workers: int, engine: str, address: str | None, **output: Any) -> None:
    """Convert the images SRC holds into OUT, a folder or a URL (s3://bucket/prefix: made
    locally, then uploaded). SRC is told by what it is (or by --src-kind):

    \b
    - an image folder: SRC/<class>/<file>, the label is the class folder's index;
    - a CSV/JSONL list: path,label[,extras...], one image a line;
    - WebDataset tars: a .tar, a folder of them, a glob ('shards/*.tar'), a brace range
      ('shards/shard-{000000..000146}.tar'), several joined by '::', or any of these by URL
      (s3://bucket/shards/...);
    - Parquet files as Hugging Face datasets writes them: a .parquet, a folder of them, a
      glob ('data/train-*.parquet'), a brace range, or by URL.

    Tars or Parquet files may also be given as several SRC, as the shell expands an unquoted
    glob or brace range: they are read in the order given.

    A tar sample is its members that share a key (the name up to its first dot), in tar order:
    the image is its jpg (jpeg, png, webp, ...) member, the label its cls member or the "label"
    of its json member; its other members that are short text become extra columns named by
    their extension. A Parquet row's image is its image (or img) column, a struct of bytes and
    path or plain binary; its label the label column; other scalar columns become extra
    columns. docs/CONVERT.md gives each source's layout.

    Every input is converted or listed in OUT/rejects.jsonl with a reason: in a folder, symlinks
    are followed, each folder walked once (a dangling or looping link is a reject), hidden
    entries ('.' names), folders that cannot be read and entries on /proc, /sys or /dev are
    rejects; so is any file that is not an image, a tar sample without an image, a key split
    across two tars, the end of a tar cut short, a null Parquet image cell. OUT and other
    datapipe datasets are not inputs. A run that converts nothing, or rejects more than
    --max-rejects, exits 1.

    Stored images are RGB in sRGB: an embedded ICC profile (Adobe RGB, Display P3, ...) is
    converted, transparency is composited onto white, 16-bit values are scaled by bit depth.

    With --tokenizer, each image's captions (one, or a list: COCO's five) are tokenized and
    stored beside it as ids (docs/captions.md); a sample without one is a reject naming it.
    """
    from preprocess.image_inputs import SourceOptions
    from preprocess.image_ops import ImageSettings
    from preprocess.images import convert_images

    if len(sources) < 2:
        raise click.UsageError("give SRC and then OUT")
    *srcs, out = sources
    captions = make_caption_options(tokenizer, caption_field, caption_max_tokens,
                                    keep_caption_text, empty_caption, caption_id_type)
    settings = ImageSettings(short_side=short_side, quality=quality, encoding=encoding,
                             max_pixels=max_pixels, subsampling=subsampling, upscale=upscale,
                             keep_icc=keep_icc)
    options = make_output_options(out, **output)
    with open_engine(engine, workers, address) as runner:
        progress = Progress(None, "img")
        try:
            result = convert_images("::".join(srcs), options, settings, runner.workers,
                                    engine=runner, progress=progress.update_with_total,
                                    sources=SourceOptions(src_kind, image_field, label_field),
                                    captions=captions)
        finally:
            progress.close()
    rate = result.inputs - _resumed_inputs(result)
    _report(result, "image", f"{rate / max(result.seconds, 1e-9):,.0f} images/s")
    _report_linked_folders(result.rejects)
    _report_captions(result.manifest)


@convert.command("text", context_settings=CONTEXT)
@click.argument("sources", nargs=-1, required=True, metavar="SRC... OUT")
@click.option("--tokenizer", "tokenizer", required=True,
              help="Path to a Hugging Face tokenizer.json (or the folder holding it, with its "
              "chat template), or 'bytes' (built-in byte-level).")
@click.option("--field", default="text", show_default=True, help="Text field of .jsonl/.parquet.")
@click.option("--doc-per-file", is_flag=True, help=".txt files hold one document each.")
@click.option("--append-eos", is_flag=True, help="End every document with the EOS id.")
@click.option("--eos-token", default=None, help="Which token is EOS (default: found by name).")
@sft_options
@engine_options
@output_options
def convert_text_cmd(sources: tuple[str, ...], tokenizer: str, field: str, doc_per_file: bool,
                     append_eos: bool, eos_token: str | None, text_kind: str, prompt_field: str,
                     completion_field: str, loss_on: str | None, chat_template: Path | None,
                     workers: int, engine: str, address: str | None, **output: Any) -> None:
    """Tokenize .txt (a line or a file per document), .jsonl or .parquet into id arrays, in
    OUT: a folder or a URL (s3://bucket/prefix: made locally, then uploaded).

    JSONL of supervised fine-tuning records, prompt/completion ({"prompt": ..., "completion":
    ...}) or chat ({"messages": [{"role": ..., "content": ...}, ...]}, rendered with the
    tokenizer's chat template), also stores a per-token loss_mask: 1 on the completion or
    assistant tokens. docs/CONVERT.md describes both."""
    from preprocess.text import convert_text
    from preprocess.text_sources import TextOptions

    if len(sources) < 2:
        raise click.UsageError("give at least one SRC and then OUT")
    *srcs, out = sources
    options = make_output_options(out, **output)
    with open_engine(engine, workers, address) as runner:
        progress = Progress(None, "doc")
        try:
            result = convert_text([Path(s) for s in srcs], options, tokenizer,
                                  TextOptions(field, doc_per_file, text_kind, prompt_field,
                                              completion_field, loss_on),
                                  append_eos=append_eos, eos_token=eos_token, engine=runner,
                                  progress=progress.update_to, chat_template=chat_template)
        finally:
            progress.close()
    tokens, this_run = result.extra["tokens"], result.extra["tokens_this_run"]
    # The dataset's documents and tokens; a resumed run's own share beside them.
    share = f" ({plural(result.manifest.num_samples - _resumed_inputs(result), 'document')} " \
        f"and {plural(this_run, 'token')} this run)" if result.resumed_shards else ""
    _report(result, "document", f"{plural(tokens, 'token')}{share}, "
            f"{this_run / max(result.seconds, 1e-9):,.0f} tokens/s")


@convert.command("vlm", context_settings=CONTEXT)
@click.argument("sources", nargs=-1, required=True, metavar="SRC... OUT")
@click.option("--tokenizer", "tokenizer", required=True,
              help="A Hugging Face tokenizer.json, or the folder holding it with its chat "
              "template (a processor saved with save_pretrained).")
@click.option("--image-folder", type=click.Path(path_type=Path), default=None,
              help="Where the records' image paths start [default: each file's folder].")
@click.option("--image-token", default="<|image_pad|>", show_default=True,
              help="The model's image placeholder token, one stored per image.")
@click.option("--chat-template", type=click.Path(path_type=Path), default=None,
              metavar="FILE", help="A Jinja chat template, instead of the one saved beside "
              "the tokenizer.")
@click.option("--short-side", default=0, show_default=True, type=int,
              help="Resize images so the shorter side is this many pixels; 0 keeps the size "
              "(the loader's preset resizes to the model's grid).")
@click.option("--quality", default=90, show_default=True, type=int, help="JPEG quality.")
@engine_options
@output_options
def convert_vlm_cmd(sources: tuple[str, ...], tokenizer: str, image_folder: Path | None,
                    image_token: str, chat_template: Path | None, short_side: int,
                    quality: int, workers: int, engine: str, address: str | None,
                    **output: Any) -> None:
    """Tokenize image conversations (LLaVA JSON, or messages + images JSONL/Parquet) with
    the model's chat template, and store each with its loss mask (assistant turns), one
    placeholder per image and its images re-encoded, in OUT (docs/vlm.md)."""
    from preprocess.image_ops import ImageSettings
    from preprocess.vlm import convert_vlm

    if len(sources) < 2:
        raise click.UsageError("give at least one SRC and then OUT")
    *srcs, out = sources
    options = make_output_options(out, **output)
    with open_engine(engine, workers, address) as runner:
        progress = Progress(None, "sample")
        try:
            result = convert_vlm([Path(s) for s in srcs], options, tokenizer,
                                 image_folder=image_folder, chat_template=chat_template,
                                 image_token=image_token,
                                 images=ImageSettings(short_side=short_side, quality=quality),
                                 engine=runner, progress=progress.update_to)
        finally:
            progress.close()
    _report(result, "sample", f"{result.manifest.num_samples / max(result.seconds, 1e-9):,.0f} "
            "samples/s")


def _report_linked_folders(rejects: list[dict[str, Any]]) -> None:
    """Say that links to folders SRC holds by their real paths were skipped: without them,
    their images would have taken the link's class."""
    from preprocess.image_folder import LINKED_FOLDER

    linked = [r for r in rejects if r["reason"].endswith(LINKED_FOLDER)]
    if linked:
        first = linked[0]["reason"].removeprefix("a link to ").removesuffix(f", {LINKED_FOLDER}")
        click.echo(f"skipped {plural(len(linked), 'link')} to folders SRC holds "
                   f"by their real paths (first: {linked[0]['source']} -> {first}); each is "
                   "walked there, under its own class")


def _report_captions(manifest: Any) -> None:
    stats = manifest.stats.get("captions")
    if not stats:
        return
    limit = manifest.settings["captions"]["max_tokens"]
    cut = f", {plural(stats['truncated'], 'caption')} cut to {limit} tokens" if limit else ""
    click.echo(f"captions: {plural(stats['captions'], 'caption')} "
               f"({manifest.tokenizer['name']}), the longest {stats['longest']} tokens{cut}")


def _resumed_inputs(result: Any) -> int:
    return sum(s.rows for s in result.manifest.shards[:result.resumed_shards])


def _report(result: Any, noun: str, rate: str) -> None:
    from preprocess.reject_limit import reject_share

    m, rejected = result.manifest, len(result.rejects)
    resumed = f", {result.resumed_shards} kept from the interrupted run" if \
        result.resumed_shards else ""
    click.echo(f"converted {plural(m.num_samples, noun)} of {plural(result.inputs, 'input')} "
               f"({rejected:,} rejected, {reject_share(rejected, result.inputs)}) into "
               f"{plural(len(m.shards), 'shard')} "
               f"({format_size(m.total_bytes)}) in {result.seconds:.1f} s, {rate}{resumed}")
    if result.rejects:
        click.echo(f"rejected {plural(len(result.rejects), 'input')}, listed with reasons in "
                   f"{join(result.out, 'rejects.jsonl')}")
