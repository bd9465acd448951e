"""Conversion throughput. Images: datapipe's `convert_images` against LitData `optimize()` and
a WebDataset ShardWriter fed by `Pool.imap`, both running `plain_transform` as their users
would; from tars and Parquet, also Streaming's MDSWriter fed by a DataLoader (.venv-vision).
Text: `convert_text` (bytes, WordPiece) against HF `datasets` `.map(num_proc)`. A run: a fresh
process into a fresh directory, timed from before its imports. Fidelity: on the first run of
each of datapipe's image conversions (--before too). A peer reads meta["inputs"][tag]."""

from __future__ import annotations

import functools
import importlib
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from datapipe.suite import fixtures, runner
from datapipe.suite.groups import convert_sources as held
from datapipe.suite.groups import vision, writer_peers
from datapipe.suite.groups.fidelity import QUALITY, SHORT_SIDE, Fidelity
from datapipe.suite.isolated import mds_run
from datapipe.suite.machine import revision
from datapipe.suite.options import Options
from datapipe.suite.report import Entry, Panel, goal_verdict, markdown_table
from datapipe.suite.runner import Group, GroupResult, Outcome, Peer, Record

SHARD_BYTES = 256 << 20
# (datapipe's peer, the other, its label, the least ratio of their rates, the rates' unit)
GOALS = (("datapipe", "litdata", "LitData's", 2.0, "images/s"),
         ("datapipe", "datapipe-before", "--before's", 0.9, "images/s"),
         ("datapipe-tars", "datapipe", "from the folder", 0.9, "images/s"),
         ("datapipe-parquet", "datapipe", "from the folder", 0.9, "images/s"),
         ("datapipe-tars", "litdata-tars", "LitData's from the tars", 2.0, "images/s"),
         ("datapipe-parquet", "litdata-parquet", "LitData's from the Parquet", 2.0, "images/s"),
         ("datapipe-tars", "mds-tars", "MDSWriter's from the tars", 1.5, "images/s"),
         ("datapipe-parquet", "mds-parquet", "MDSWriter's from the Parquet", 1.5, "images/s"),
         ("datapipe-writer", "disk", "the disk's sequential", 0.8, "MB/s"))
SOURCES = ("tars", "parquet")  # the photos as people hold them (convert_sources)
PIECES_LINE = (f"{fixtures.PIECES} WebDataset tars (jpg + cls) and {held.PARQUET_FILES} "
               "Hugging Face Parquet files (image struct of bytes and path, label)")
PSNR_GAP_DB = 0.5  # datapipe's images: median PSNR within this of a full decode's
SAME_TOKENS = {"datasets": "datapipe-text-wordpiece"}  # peer: datapipe with its tokenizer
MDS_PEERS = ("mds-tars", "mds-parquet", "mds-writer")
MDS_CHILD = Path(mds_run.__file__)


# ---------------------------------------------------------------- the peers (in the child)


def plain_transform(item: tuple[str, int]) -> dict[str, Any]:
    """One photo the straightforward way: full decode, orient, RGB, resize, re-encode."""
    path, label = item
    return held.plain_transform(Path(path).read_bytes(), label)


def datapipe_images(src: Path, out: Path, workers: int) -> Record:
    from preprocess.image_ops import ImageSettings
    from preprocess.images import convert_images
    from preprocess.output import OutputOptions

    result = convert_images(src, OutputOptions(out), ImageSettings(), workers)
    return {"items": result.inputs - len(result.rejects), "rejects": len(result.rejects)}


def litdata_images(src: Path, out: Path, workers: int) -> Record:
    import litdata

    items = fixtures.list_photos(src)
    litdata.optimize(fn=plain_transform, inputs=items, output_dir=str(out),
                     num_workers=workers, chunk_bytes=SHARD_BYTES)
    return {"items": len(items)}


def webdataset_images(src: Path, out: Path, workers: int) -> Record:
    import multiprocessing

    import webdataset as wds

    items = fixtures.list_photos(src)
    out.mkdir(parents=True)
    with wds.ShardWriter(str(out / "shard-%06d.tar"), maxsize=SHARD_BYTES,
                         verbose=0) as sink, multiprocessing.Pool(workers) as pool:
        # chunksize as in datapipe's engine, so both pay the same per-item IPC.
        for index, sample in enumerate(pool.imap(plain_transform, items, chunksize=16)):
            sink.write({"__key__": f"{index:08d}", "jpg": sample["image"], "cls": sample["label"]})
    return {"items": len(items)}


def datapipe_text(src: Path, out: Path, workers: int, wordpiece: bool) -> Record:
    from preprocess.output import OutputOptions
    from preprocess.text import convert_text
    from preprocess.text_sources import TextOptions

    tokenizer = str(fixtures.wordpiece_tokenizer()) if wordpiece else "bytes"
    result = convert_text([src], OutputOptions(out), tokenizer, TextOptions(), workers=workers)
    return {"items": result.inputs, "tokens": result.extra["tokens_this_run"]}


def datasets_text(src: Path, out: Path, workers: int) -> Record:
    import datasets
    import pyarrow.compute as pc
    from tokenizers import Tokenizer

    datasets.disable_progress_bars()
    data = datasets.load_dataset("text", data_files=sorted(map(str, src.glob("*.txt"))),
                                 split="train", cache_dir=str(out / "cache"))
    tokenizer = Tokenizer.from_file(str(fixtures.wordpiece_tokenizer()))
    # Saved for inference it truncates and pads; for training, every token unpadded (datapipe).
    tokenizer.no_truncation()
    tokenizer.no_padding()

    def encode(batch: dict[str, list[str]]) -> dict[str, list[list[int]]]:
        encodings = tokenizer.encode_batch(batch["text"], add_special_tokens=False)
        return {"input_ids": [e.ids for e in encodings]}

    data = data.map(encode, batched=True, num_proc=workers, remove_columns=["text"])
    tokens = pc.sum(pc.list_value_length(data.data.column("input_ids"))).as_py()
    return {"items": len(data), "tokens": int(tokens)}


def peer(name: str, label: str, tag: str, convert: Callable[..., Record], *modules: str,
         dists: tuple[str, ...] = (), ours: bool = False) -> Peer:
    """A peer whose run imports `modules`, then converts, all clocked; rate: tokens or items/s."""
    def measure(job: dict[str, Any]) -> Record:
        _, import_s = runner.timed(lambda: [importlib.import_module(m) for m in modules])
        counts, seconds = runner.timed(lambda: convert(Path(job["src"]), Path(job["out"]),
                                                       job["workers"]))
        seconds += import_s
        return {**counts, "seconds": seconds, "import_s": import_s,
                "rate": counts.get("tokens", counts["items"]) / seconds}
    return Peer(name, label, measure, modules, dists, ours=ours, tag=tag)


TEXT_MODULES = ("preprocess.text", "preprocess.text_sources", "preprocess.output")


class ConvertGroup(Group):
    name, title, report = "convert", "Conversion throughput", "convert"
    peers = (
        peer("datapipe", "datapipe convert_images", "photos", datapipe_images,
             "preprocess.images", "preprocess.image_ops", "preprocess.output", ours=True),
        peer("litdata", "LitData optimize()", "photos", litdata_images, "litdata"),
        peer("webdataset", "WebDataset ShardWriter + Pool.imap", "photos", webdataset_images,
             "multiprocessing", "webdataset"),
        peer("datapipe-tars", "datapipe convert_images (WebDataset tars)", "tars",
             datapipe_images, "preprocess.images", "preprocess.image_ops", "preprocess.output",
             ours=True),
        peer("datapipe-parquet", "datapipe convert_images (HF Parquet)", "parquet",
             datapipe_images, "preprocess.images", "preprocess.image_ops", "preprocess.output",
             ours=True),
        peer("litdata-tars", "LitData optimize() over the tars", "tars", held.litdata_tars,
             "litdata", "webdataset"),
        peer("litdata-parquet", "LitData optimize() over the Parquet", "parquet",
             held.litdata_parquet, "litdata", "pyarrow.parquet"),
        peer("webdataset-tars", "WebDataset pipeline + WebLoader + ShardWriter", "tars",
             held.webdataset_tars, "webdataset"),
        # Streaming needs torchvision: its own venv (vision.py), run by attempt().
        Peer("mds-tars", "Streaming MDSWriter + DataLoader over the tars (.venv-vision)", None,
             tag="tars"),
        Peer("mds-parquet", "Streaming MDSWriter + DataLoader over the Parquet (.venv-vision)",
             None, tag="parquet"),
        Peer("datapipe-writer", "datapipe DatasetWriter, encoded samples",
             writer_peers.datapipe_writer, ("datapipe",), ours=True, tag="writer"),
        Peer("disk", "the disk: sequential write + fsync", writer_peers.disk, reference=True,
             tag="writer"),
        Peer("mds-writer", "Streaming MDSWriter, encoded samples (.venv-vision)", None,
             tag="writer"),
        peer("datapipe-text-bytes", "datapipe convert_text (bytes)", "text",
             functools.partial(datapipe_text, wordpiece=False), *TEXT_MODULES, ours=True),
        peer("datapipe-text-wordpiece", "datapipe convert_text (wordpiece)", "text",
             functools.partial(datapipe_text, wordpiece=True), *TEXT_MODULES,
             dists=(fixtures.TOKENIZER_DIST,), ours=True),
        peer("datasets", "HF datasets .map(num_proc) (wordpiece)", "text", datasets_text,
             "datasets", "tokenizers", "pyarrow", dists=(fixtures.TOKENIZER_DIST,)),
    )
    forms = {"tars": held.make_tars, "parquet": held.make_parquet}  # noqa: RUF012
    fidelity: Fidelity | None = None  # of this run's photos, made by prepare

    def prepare(self, opts: Options, outcomes: dict[str, Outcome]) -> dict[str, Any]:
        """The photos, the corpus and the fidelity references, each if a peer needs it."""
        for name in [n for n in outcomes if opts.smoke and n.startswith("datapipe-text-bytes")]:
            outcomes[name].status = "skipped"  # smoke: datapipe's wordpiece run shows text works
        for name in MDS_PEERS:
            if outcomes[name].status == "ok" and not vision.VENV.ready():
                outcomes[name].status = vision.NOT_INSTALLED
        live = [p for p in self.all_peers(opts) if outcomes[p.name].status == "ok"]
        photos = fixtures.ensure_photos(opts.data, opts.photos)
        meta: dict[str, Any] = {
            "photos": fixtures.photo_stats(photos), "inputs": {"photos": str(photos)},
            "workers": opts.workers, "repeats": opts.repeats, "retries": opts.retries,
            "before": opts.before and f"{opts.before} at {revision(opts.before.resolve())}"}
        for form in sorted({p.tag for p in live} & set(SOURCES)):
            try:
                made = fixtures.ensure_form(self.name, form, photos, opts.data, opts.workers)
            except runner.CHILD_FAILURES as exc:
                for p in live:
                    if p.tag == form:
                        outcomes[p.name].status = f"failed: making the {form}: {exc}"
                continue
            meta["inputs"][form] = made["path"]
            fixtures.warm_page_cache(sorted(Path(made["path"]).iterdir()))
        meta["inputs"]["writer"], meta["writer_mb"] = "", 16 if opts.smoke else 1000
        if any(p.tag == "text" for p in live):
            corpus = fixtures.ensure_corpus(opts.data, opts.text_mb)
            size = fixtures.warm_page_cache(sorted(corpus.glob("*.txt")))
            meta["inputs"]["text"], meta["text"] = str(corpus), {"megabytes": size / 1e6}
        self.fidelity, meta["psnr"] = None, {}
        if any(p.ours and p.tag == "photos" for p in live):
            count = 4 if opts.smoke else 200
            print(f"reference images for PSNR ({count} photos) ...", flush=True)
            self.fidelity = Fidelity(photos, count)  # its measured: filled in by the runs
            meta["full_decode_psnr"], meta["psnr"] = self.fidelity.full_decode, \
                self.fidelity.measured
        return meta

    def job(self, peer: Peer, meta: dict[str, Any], opts: Options, run_dir: Path) -> Record:
        return {"src": meta["inputs"][peer.tag], "out": str(run_dir / "out"),
                "workers": meta["workers"], "megabytes": meta["writer_mb"]}

    def attempt(self, peer: Peer, job: Any, run_dir: Path, opts: Options) -> Record:
        """The child's run, its output's size and fidelity; redone while others disturb it."""
        out = Path(job["out"])

        def once() -> Record:
            try:
                run = self.run_one(peer, job, run_dir)
                if "error" not in run:
                    run["output_bytes"] = fixtures.tree_bytes(out)
                    if self.fidelity and peer.ours and peer.tag == "photos":
                        self.fidelity.measure(peer.name, out)
                return run
            finally:
                shutil.rmtree(out, ignore_errors=True)
        return runner.least_disturbed(once, opts.settle, opts.retries)

    def run_one(self, peer: Peer, job: Record, run_dir: Path) -> Record:
        if peer.name in MDS_PEERS:  # Streaming's venv, by path
            return vision.run_isolated(MDS_CHILD, {**job, "source": peer.tag,
                                                   "shard_bytes": SHARD_BYTES}, run_dir)
        return runner.run_in_child(self.name, peer, job, run_dir)

    def progress(self, peer: Peer, run: Record) -> str:
        return f"{run['seconds']:.1f} s (other work: {run['others_cores']:.2f} cores)"

    def panels(self, result: GroupResult) -> list[Panel]:
        meta = result.meta
        workers = f"{meta['workers']} workers, import and start-up included."

        def entries(*tags: str) -> list[Entry]:
            return [Entry(p.name, p.label, result.outcomes[p.name].status,
                          [r["rate"] for r in result.outcomes[p.name].runs], p.ours,
                          p.reference) for p in result.peers if p.tag in tags]

        job = f"{meta['photos']['count']} photos → shorter side {SHORT_SIDE}, JPEG q{QUALITY}"
        return [Panel("convert-images", "Converting images", "images/s", entries("photos"),
                      "datapipe", "litdata", job=f"{job}; {workers}"),
                Panel("convert-sources", "Converting images from tars and Parquet", "images/s",
                      entries("photos", *SOURCES), "datapipe-tars", "litdata-tars",
                      job=f"The same photos held as {PIECES_LINE}; {job}; {workers}"),
                Panel("convert-writer", "Writing encoded samples", "MB/s",
                      entries("writer"), "datapipe-writer", "disk",
                      job=f"{meta['writer_mb']:,} MB of {writer_peers.SAMPLE_BYTES // 1000} KB "
                      "samples (random bytes, as JPEGs are) and an int64 label, from one "
                      "process; the disk: the same bytes to one file, fsynced."),
                Panel("convert-text", "Tokenizing text", "tokens/s", entries("text"),
                      "datapipe-text-wordpiece", "datasets",
                      job=f"{meta.get('text', {}).get('megabytes', 0):.0f} MB of text; "
                      f"{workers}")]

    def details(self, result: GroupResult) -> list[str]:
        meta, photos = result.meta, result.meta["photos"]
        text = f" Text: {meta['text']['megabytes']:.1f} MB of English-like lines → token ids." \
            if "text" in meta else ""
        return ["## Goals", "", *[f"- {line}" for line in goals(result)], "", "## Every tool", "",
                f"Images: {photos['count']} JPEGs ({photos['megabytes']:.1f} MB, shorter side "
                f"{photos['min_short_side']}-{photos['max_short_side']} px) → shorter side "
                f"{SHORT_SIDE}, JPEG q{QUALITY}.{text}", "",
                markdown_table(["tool", "PSNR dB", "text MB/s", "median s", "import s", "CPU s",
                                "output"], [row(result, p) for p in result.peers
                                            if result.median(p.name, "seconds")]),
                "", *[f"- {line}" for line in notes(result)]]


def row(result: GroupResult, peer: Peer) -> list[str]:
    """PSNR or text MB/s; median, import and CPU (all its processes) seconds; output."""
    median, text = functools.partial(result.median, peer.name), peer.tag == "text"
    psnr = result.meta["psnr"].get(peer.name)
    wrong = f", {psnr['wrong_size']} of {psnr['images']} sized wrong" \
        if psnr and psnr["wrong_size"] else ""
    return [peer.label, "" if psnr is None else "all sizes wrong" if psnr["median_db"] is None
            else f"{psnr['median_db']:.2f}{wrong}",
            f"{result.meta['text']['megabytes'] / median('seconds'):.1f}" if text else "",
            f"{median('seconds'):.2f}", figure(median("import_s"), ".2f"),
            figure(median("cpu_s"), ".1f"),
            f"{result.outcomes[peer.name].runs[0]['tokens']:,} tokens" if text
            else f"{median('output_bytes') / 1e6:.1f} MB"]


def figure(value: float | None, spec: str) -> str:
    return "–" if value is None else format(value, spec)


def goals(result: GroupResult) -> list[str]:
    """datapipe's images/s against LitData's and --before's; its images against a full decode."""
    meta, lines = result.meta, []
    for name, other, whose, goal, unit in GOALS:
        ours, theirs = result.median(name, "rate"), result.median(other, "rate")
        if ours and theirs:
            lines.append(f"{name}: {ours:,.0f} {unit} = {ours / theirs:.2f}× {whose} "
                         f"{theirs:,.0f} {unit} ({goal_verdict(goal, ours >= goal * theirs)}).")
        elif other in result.outcomes and name in result.outcomes:  # why not: the panel says
            lines.append(f"{name} ≥ {goal:g}× {whose} {unit}: not measured.")
    stored, full = meta["psnr"].get("datapipe"), meta.get("full_decode_psnr")
    if stored and full and stored["median_db"] is not None:
        gap = full["median_db"] - stored["median_db"]
        lines.append(f"Fidelity: median PSNR {stored['median_db']:.2f} dB against the Pillow "
                     f"reference over {stored['images']} evenly spaced photos, "
                     f"{full['median_db']:.2f} dB for a full decode with the same resize and "
                     f"encoding: {gap:.2f} dB apart (goal: within {PSNR_GAP_DB} dB, "
                     f"{'met' if gap <= PSNR_GAP_DB else 'NOT met'}).")
    return lines


def notes(result: GroupResult) -> list[str]:
    meta, count = result.meta, result.meta["photos"]["count"]
    lines = [f"Each figure: median of {meta['repeats']} runs, {meta['workers']} workers, each "
             "run a fresh process into a fresh directory; times include imports and worker "
             "start-up. CPU s: user + system time of all the run's processes. A run that other "
             f"work on the machine disturbed is redone, up to {meta['retries']} times. "
             f"--before: {meta['before'] or 'not run'}."]
    for p in result.peers:  # did each do the whole job?
        first = (result.outcomes[p.name].runs or [None])[0]
        ours = result.outcomes[SAME_TOKENS[p.name]].runs if p.name in SAME_TOKENS else []
        if first and p.tag not in ("text", "writer") and first["items"] != count:
            lines.append(f"{p.label} converted {first['items']} of the {count} photos.")
        elif first and ours and first["tokens"] != ours[0]["tokens"]:
            lines.append(f"Warning: {p.label} made {first['tokens']:,} tokens, datapipe "
                         f"{ours[0]['tokens']:,}; their tokens/s are not comparable.")
    return lines


GROUP = ConvertGroup()
