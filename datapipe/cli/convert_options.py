"""The options of the `datapipe convert` commands: where and how shards are written, which
engine does the work (both), and how SRC is read (images)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import click

from datapipe.cli.common import add_options


def output_options(func: Callable[..., Any]) -> Any:
    from datapipe.format.shard_formats import FORMAT_NAMES

    return add_options(func, [
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
    ])


def source_options(func: Callable[..., Any]) -> Any:
    """How `convert images` reads SRC."""
    from preprocess.image_inputs import SOURCE_KINDS

    return add_options(func, [
        click.option("--src-kind", type=click.Choice(SOURCE_KINDS), default="auto",
                     show_default=True, help="What SRC is: told by what it is, or said: an "
                     "image folder, a CSV/JSONL list, WebDataset tars, Parquet files."),
        click.option("--image-field", default=None, metavar="NAME[;NAME...]",
                     help="Tars: the member extension the image is taken from, the first of "
                     "these a sample has [default: jpg;jpeg;png;webp, then other image "
                     "types]. Parquet: the image column [default: image, else img]."),
        click.option("--label-field", default=None, metavar="NAME[;NAME...]",
                     help="Tars: the member holding the label as text, or json:KEY for a key "
                     "of the json member, the first of these a sample has [default: "
                     "cls;json:label]. Parquet: the label column [default: label, labels, "
                     "else the file's one ClassLabel]. Where no input has a label, labels are "
                     "-1."),
    ])


def caption_options(func: Callable[..., Any]) -> Any:
    """Captions beside the images of `convert images`, tokenized once."""
    from preprocess.captions import EMPTY_POLICIES

    return add_options(func, [
        click.option("--tokenizer", default=None, metavar="TOKENIZER",
                     help="Store each image's captions as token ids: a Hugging Face "
                     "tokenizer.json (or the folder holding it) or 'bytes', as convert text "
                     "takes. Ids are the tokenizer's own, its special tokens included (CLIP's "
                     "start and end of text), ending with its end-of-text id."),
        click.option("--caption-field", default=None, metavar="NAME[;NAME...]",
                     help="Where the caption is: tars, a member extension or json:KEY [default: "
                     "txt;json:caption]; Parquet, a column [caption;text]; CSV/JSONL, a field "
                     "[caption]; a folder, the extension of a sidecar file beside each image "
                     "(cat.jpg -> cat.txt) [txt]. A JSON list (or Parquet list) is several "
                     "captions of one image."),
        click.option("--caption-max-tokens", default=None, type=int, metavar="N",
                     help="Cut longer captions to N ids, keeping the end-of-text id; the summary "
                     "counts them. [default: keep every id]"),
        click.option("--keep-caption-text", is_flag=True,
                     help="Also store the captions as text (column 'captions', a JSON list)."),
        click.option("--empty-caption", type=click.Choice(EMPTY_POLICIES), default="reject",
                     show_default=True, help="A sample with no caption or a blank one: a "
                     "reject naming it, or kept with the ids of an empty caption."),
        click.option("--caption-id-type", type=click.Choice(["uint8", "uint16", "uint32"]),
                     default=None, help="The stored id type [default: the smallest the "
                     "vocabulary fits]; a vocabulary it cannot hold is refused."),
    ])


def make_caption_options(tokenizer: str | None, caption_field: str | None,
                         caption_max_tokens: int | None, keep_caption_text: bool,
                         empty_caption: str, caption_id_type: str | None) -> Any:
    """The converter's CaptionOptions (None: no captions) from the values of
    `caption_options`; a caption option without --tokenizer is refused."""
    from datapipe.errors import ArgumentError
    from preprocess.captions import CaptionOptions

    if tokenizer is None:
        given = [name for name, value in (
            ("--caption-field", caption_field), ("--caption-max-tokens", caption_max_tokens),
            ("--keep-caption-text", keep_caption_text or None),
            ("--caption-id-type", caption_id_type)) if value is not None]
        if given:
            raise ArgumentError(f"{given[0]} needs --tokenizer: captions are stored as token "
                                "ids")
        return None
    return CaptionOptions(tokenizer, caption_field, caption_max_tokens, keep_caption_text,
                          empty_caption, caption_id_type)


def sft_options(func: Callable[..., Any]) -> Any:
    """How `convert text` reads supervised fine-tuning JSONL."""
    from preprocess.sft_records import LOSS_ON, TEXT_KINDS

    return add_options(func, [
        click.option("--text-kind", type=click.Choice(["auto", *TEXT_KINDS]), default="auto",
                     show_default=True, help="What the JSONL records are: told by each file's "
                     "first object (messages: chat; the prompt and completion fields: "
                     "prompt-completion; else plain text of --field), or said."),
        click.option("--prompt-field", default="prompt", show_default=True,
                     help="Prompt field of prompt/completion records."),
        click.option("--completion-field", default="completion", show_default=True,
                     help="Completion field of prompt/completion records."),
        click.option("--loss-on", type=click.Choice(LOSS_ON), default=None,
                     help="Which tokens the stored loss_mask lets the loss count: assistant "
                     "(chat's default), completion (prompt/completion's default), or all (no "
                     "mask stored)."),
        click.option("--chat-template", type=click.Path(path_type=Path), default=None,
                     metavar="FILE", help="A Jinja chat template for chat records, instead of "
                     "the one saved beside the tokenizer."),
    ])


def engine_options(func: Callable[..., Any]) -> Any:
    return add_options(func, [
        click.option("--workers", default=0, type=int,
                     help="Processes (Ray: tasks at once); 0 = all cores (Ray: all the "
                     "cluster's)."),
        click.option("--engine", type=click.Choice(["local", "ray"]), default="local",
                     show_default=True, help="Where the work runs: processes on this machine, "
                     "or tasks on a Ray cluster (needs: pip install 'datapipe[ray]'). The "
                     "output is the same."),
        click.option("--address", default=None, metavar="ADDR",
                     help="With --engine ray: the cluster (HOST:PORT, ray://HOST:PORT or auto; "
                     "default: RAY_ADDRESS, else a Ray instance started on this machine)."),
    ])


@contextlib.contextmanager
def open_engine(name: str, workers: int, address: str | None) -> Iterator[Any]:
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


def make_output_options(out: str, shard_format: str, shard_size: str, overwrite: bool,
                        strict: bool, staging: Path | None, max_rejects: str | None) -> Any:
    """The converters' OutputOptions from the values of `output_options`."""
    from datapipe.format.remote import is_url, local_path
    from preprocess.output import OutputOptions, parse_size
    from preprocess.reject_limit import RejectLimit

    limit = None if max_rejects is None else RejectLimit.parse(max_rejects)
    return OutputOptions(out=out if is_url(out) else local_path(out), shard_format=shard_format,
                         shard_size=parse_size(shard_size), overwrite=overwrite, strict=strict,
                         staging=staging, max_rejects=limit)
