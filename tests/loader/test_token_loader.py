from __future__ import annotations

import math
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch

import datapipe as dp
import datapipe.format.writer
from datapipe.errors import ArgumentError, DataError
from datapipe.format import Dataset
from tests.conftest import convert
from tests.loader.helpers import check_resume_at_every_step
from tests.text.helpers import write_documents

LAYOUTS = {
    "packed": {"max_tokens": 512},
    "padded": {"max_tokens": 1024},
    "fixed": {"max_tokens": 512, "seq_len": 128},
}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """300 documents of skewed length (log-normal, a few longer than 128 tokens)."""
    root = tmp_path_factory.mktemp("tokens")
    rng = np.random.default_rng(0)
    words = ["alpha", "beta", "gamma", "delta", "pi", "omega", "x"]
    lines = [" ".join(rng.choice(words, size=max(1, int(n))))
             for n in rng.lognormal(2.5, 0.9, size=300).clip(1, 150)]
    (root / "a.txt").write_text("\n".join(lines) + "\n")
    out = root / "out"
    convert("text", root / "a.txt", out, "--tokenizer", "bytes", "--append-eos",
            "--shard-size", "8KB")
    return out


def _dataset_tokens(path: Path) -> Counter:
    with Dataset(path) as ds:
        return Counter(np.concatenate([ds[i]["tokens"] for i in range(len(ds))]).tolist())


def _real_tokens(batch: dict) -> list[int]:
    if "attention_mask" in batch:
        return batch["input_ids"][batch["attention_mask"].bool()].tolist()
    return batch["input_ids"][: batch["num_real_tokens"]].tolist()


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("workers", [0, 2])
def test_an_epoch_is_exactly_the_datasets_tokens(corpus: Path, layout: str,
                                                 workers: int) -> None:
    with dp.TokenLoader(corpus, layout=layout, num_workers=workers, **LAYOUTS[layout]) as loader:
        batches = list(loader)
    got = Counter(t for b in batches for t in _real_tokens(b))
    assert got == _dataset_tokens(corpus)
    docs = Counter(int(i) for b in batches for i in b["index"].tolist() if i >= 0)
    if layout == "padded":
        assert sorted(docs) == list(range(300)) and set(docs.values()) == {1}
    else:  # split documents appear once per piece
        assert sorted(docs) == list(range(300))


def test_packed_has_no_padding_and_consistent_fields(corpus: Path) -> None:
    with dp.TokenLoader(corpus, max_tokens=512, layout="packed") as loader:
        for batch in loader:
            ids, cu = batch["input_ids"], batch["cu_seqlens"]
            assert batch["efficiency"] == 1.0 and len(ids) <= 512
            assert cu.dtype == torch.int32 and cu[0] == 0 and cu[-1] == len(ids)
            lengths = torch.diff(cu)
            assert batch["max_seqlen"] == int(lengths.max())
            expected_pos = torch.cat([torch.arange(int(n)) for n in lengths])
            assert torch.equal(batch["position_ids"], expected_pos)
            for a, b in zip(cu[:-1].tolist(), cu[1:].tolist(), strict=True):
                assert torch.equal(batch["labels"][a:b - 1], ids[a + 1:b])
                # -100 at a document's end; a piece of a longer one keeps its last target
                # (tests/text/test_long_documents.py), which this once wrongly dropped too
                if b - a < 512:
                    assert batch["labels"][b - 1] == -100
        assert loader.efficiency == 1.0


def test_pad_to_multiple_adds_one_dummy_sequence(corpus: Path) -> None:
    with dp.TokenLoader(corpus, max_tokens=500, layout="packed", pad_to_multiple_of=8) as loader:
        batch = next(iter(loader))
    n = len(batch["input_ids"])
    assert n % 8 == 0 and n <= 500
    tail = n - batch["num_real_tokens"]
    if tail:
        assert int(batch["cu_seqlens"][-1] - batch["cu_seqlens"][-2]) == tail
        assert (batch["labels"][-tail:] == -100).all()


def test_padded_buckets_lengths_and_masks(corpus: Path) -> None:
    with dp.TokenLoader(corpus, max_tokens=1024, layout="padded", pad_to_multiple_of=8,
                        batch_multiple_of=2) as loader:
        batches = list(loader)
        efficiency = loader.efficiency
    for batch in batches:
        rows, width = batch["input_ids"].shape
        assert width % 8 == 0 and rows * width <= 1024
        mask = batch["attention_mask"]
        assert (batch["labels"][mask == 0] == -100).all()
    assert efficiency > 0.85, "length bucketing keeps padding low on a skewed mix"


def test_fixed_rows_are_full_length_and_efficient(corpus: Path) -> None:
    with dp.TokenLoader(corpus, max_tokens=1024, layout="fixed", seq_len=128) as loader:
        batches = list(loader)
        efficiency = loader.efficiency
    for batch in batches:
        assert batch["input_ids"].shape[1] == 128 and batch["input_ids"].shape[0] <= 8
        cu = batch["cu_seqlens"]
        assert cu[-1] == batch["input_ids"].numel()
        flat_pos = batch["position_ids"].flatten()
        expected = torch.cat([torch.arange(int(n)) for n in torch.diff(cu)])
        assert torch.equal(flat_pos, expected), "positions restart at every document"
    assert efficiency > 0.95


def _causal_lm_loss_per_token(model: torch.nn.Module, ids: torch.Tensor, labels: torch.Tensor,
                              mask: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    logits = model(ids, mask, positions)
    return torch.nn.functional.cross_entropy(logits, labels, ignore_index=-100,
                                             reduction="none")


class TinyCausalLM(torch.nn.Module):
    """One attention layer; `mask[i, j]` says token i may attend to token j."""

    def __init__(self, vocab: int = 260, dim: int = 16) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed = torch.nn.Embedding(vocab, dim)
        self.pos = torch.nn.Embedding(512, dim)
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.out = torch.nn.Linear(dim, vocab)

    def forward(self, ids: torch.Tensor, mask: torch.Tensor,
                positions: torch.Tensor) -> torch.Tensor:
        x = self.embed(ids) + self.pos(positions)
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
        scores = scores.masked_fill(~mask, float("-inf"))
        return self.out(torch.softmax(scores, dim=-1) @ v + x)


def test_packed_loss_equals_padded_loss_per_token(corpus: Path) -> None:
    model = TinyCausalLM().double()
    with dp.TokenLoader(corpus, max_tokens=400, layout="packed", shuffle=False) as loader:
        packed = next(iter(loader))
    cu = packed["cu_seqlens"].long()
    n = len(packed["input_ids"])
    doc_of = torch.repeat_interleave(torch.arange(len(cu) - 1), torch.diff(cu))
    causal = torch.tril(torch.ones(n, n, dtype=torch.bool))
    block_diagonal = causal & (doc_of[:, None] == doc_of[None, :])
    packed_loss = _causal_lm_loss_per_token(model, packed["input_ids"], packed["labels"],
                                            block_diagonal, packed["position_ids"])
    for d, (a, b) in enumerate(zip(cu[:-1].tolist(), cu[1:].tolist(), strict=True)):
        width = b - a + 5  # the same document, padded on the right
        ids = torch.zeros(width, dtype=torch.long)
        ids[: b - a] = packed["input_ids"][a:b]
        labels = torch.full((width,), -100, dtype=torch.long)
        labels[: b - a] = packed["labels"][a:b]
        valid = torch.arange(width) < b - a
        mask = torch.tril(torch.ones(width, width, dtype=torch.bool)) & valid[None, :]
        mask |= torch.eye(width, dtype=torch.bool)  # padding rows attend to themselves only
        padded_loss = _causal_lm_loss_per_token(model, ids, labels, mask, torch.arange(width))
        torch.testing.assert_close(padded_loss[: b - a], packed_loss[a:b], msg=f"doc {d}")


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize(("workers", "window"), [(0, None), (1, None), (0, 16)])
def test_resume_at_every_step_is_exact(corpus: Path, layout: str, workers: int,
                                       window: int | None) -> None:
    """`window` 16: the epoch's 300 documents planned in 19 windows, a resume landing in any."""
    check_resume_at_every_step(lambda: dp.TokenLoader(
        corpus, layout=layout, num_workers=workers, seed=5, plan_window=window,
        **LAYOUTS[layout]), epoch=2)


@pytest.mark.parametrize("window", [None, 16])
@pytest.mark.parametrize("world", [2, 3])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_exactly_once_across_ranks(corpus: Path, world: int, layout: str,
                                   window: int | None) -> None:
    tokens, steps = Counter(), set()
    for rank in range(world):
        with dp.TokenLoader(corpus, layout=layout, rank=rank, world_size=world,
                            plan_window=window, **LAYOUTS[layout]) as loader:
            batches = list(loader)
        steps.add(len(batches))
        tokens.update(t for b in batches if not b["is_padding"] for t in _real_tokens(b))
    assert len(steps) == 1 and tokens == _dataset_tokens(corpus)


def test_determinism_and_new_order_each_epoch(corpus: Path) -> None:
    def order(epoch: int, seed: int = 0) -> list[int]:
        with dp.TokenLoader(corpus, max_tokens=512, seed=seed) as loader:
            loader.set_epoch(epoch)
            return [i for b in loader for i in b["index"].tolist()]

    assert order(0) == order(0) and order(0) != order(1) and order(0, seed=1) != order(0)


def test_length_index_is_cached_beside_the_shards(corpus: Path) -> None:
    with dp.TokenLoader(corpus, max_tokens=512):
        pass
    assert len(list(corpus.glob(".datapipe-length-index-*.npy"))) == 1


def test_errors_are_clear(corpus: Path, tmp_path: Path) -> None:
    with pytest.raises(ArgumentError, match=r"document .* tokens, more than max_tokens"):
        dp.TokenLoader(corpus, max_tokens=64, layout="padded")
    with pytest.raises(ArgumentError, match="smaller than one row"):
        dp.TokenLoader(corpus, max_tokens=64, layout="fixed", seq_len=128)
    with pytest.raises(ArgumentError, match="layout"):
        dp.TokenLoader(corpus, max_tokens=64, layout="ragged")
    with pytest.raises(ArgumentError, match="seed must be a non-negative integer"):
        dp.TokenLoader(corpus, max_tokens=512, seed=-2)
    with pytest.raises(ArgumentError, match="num_workers must be a non-negative integer"):
        dp.TokenLoader(corpus, max_tokens=512, num_workers=-1)
    for pad_id in (-1, 1.5):
        with pytest.raises(ArgumentError, match="pad_id must be a non-negative integer"):
            dp.TokenLoader(corpus, max_tokens=512, layout="padded", pad_id=pad_id)
    for name in ("prefetch", "bucket_batches", "pack_window"):
        with pytest.raises(ArgumentError, match=f"{name} must be >= 1"):
            dp.TokenLoader(corpus, max_tokens=512, **{name: 0})
    with pytest.raises(ArgumentError, match="is not a torch device"):
        dp.TokenLoader(corpus, max_tokens=512, device="gpu0")
    other = tmp_path / "tokenizer.json"
    other.write_text("{}")
    with pytest.raises(DataError, match="tokenized with 'bytes'"):
        dp.TokenLoader(corpus, max_tokens=512, tokenizer=str(other))
    dp.TokenLoader(corpus, max_tokens=512, tokenizer="bytes").close()


@pytest.mark.parametrize("layout", LAYOUTS)
def test_shards_of_many_record_batches_give_the_same_batches(corpus: Path, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch,
                                                             layout: str) -> None:
    """A large shard is written as several record batches; the workers' direct slicing of the
    token column finds each row in its batch."""
    monkeypatch.setattr(datapipe.format.writer, "CHUNK_BYTES", 600)
    source = corpus.parent / "a.txt"
    chunked = tmp_path / "chunked"
    convert("text", source, chunked, "--tokenizer", "bytes", "--append-eos",
            "--shard-size", "8KB")
    with Dataset(chunked) as ds:
        assert min(len(ds.shard(k).batch_starts()) for k in range(ds.num_shards)) > 3

    def batches(path: Path) -> list[list[int]]:
        with dp.TokenLoader(path, layout=layout, num_workers=2, seed=3,
                            **LAYOUTS[layout]) as loader:
            return [b["input_ids"].tolist() for b in loader]

    assert batches(chunked) == batches(corpus)


def test_an_epoch_of_a_million_batches_is_planned_without_a_wait(tmp_path: Path) -> None:
    """max_tokens=1 over 1.5 million tokens: a batch per token, 750,000 per rank. Planning once
    took a step over the whole plan per batch (minutes here); now the first batch comes at
    once. Run in a process of its own, so that a regression fails at the timeout instead of
    hanging."""
    rng = np.random.default_rng(5)
    (tmp_path / "a.txt").write_text("".join("x" * int(n) + "\n"
                                            for n in rng.integers(1, 200, 15000)))
    convert("text", tmp_path / "a.txt", tmp_path / "out", "--tokenizer", "bytes",
            "--append-eos")
    with Dataset(tmp_path / "out") as ds:
        tokens = int(ds.scalar("length").sum())
    script = ("import sys, datapipe as dp\n"
              "with dp.TokenLoader(sys.argv[1], max_tokens=1, rank=1, world_size=2) as loader:\n"
              "    print(len(loader), int(next(iter(loader))['num_real_tokens']))\n")
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(-(-tokens // 2)), "1"]


def test_a_state_carries_the_cursor_of_its_window_and_a_bad_one_is_refused(
        corpus: Path) -> None:
    """A state names where the window of its next batch begins (a resume plans that window
    only); an impossible cursor is refused, and a refused state leaves the loader's plan as it
    was."""
    def make(seed: int = 5) -> dp.TokenLoader:
        return dp.TokenLoader(corpus, max_tokens=512, plan_window=16, seed=seed)

    with make() as loader:
        full = [b["index"].tolist() for b in loader]
    with make() as loader:
        it = iter(loader)
        for _ in range(len(full) // 2):
            next(it)
        state = loader.state_dict()
    window, batch, documents, tokens = state["cursor"]
    assert 0 < window < -(-300 // 16) and 0 < batch <= len(full) // 2 and documents > 0
    with make() as loader:
        loader.load_state_dict(state)
        assert [b["index"].tolist() for b in loader] == full[len(full) // 2:]
    for bad in ([10**6, batch, documents, tokens], [window, batch, 10**6, tokens]):
        with make() as loader, pytest.raises(ArgumentError, match=r"cursor .* is impossible"):
            loader.load_state_dict({**state, "cursor": bad})
    with make(seed=6) as loader:
        wrong = {**state, "cursor": [1, 0, 0, 0]}  # window 1 would begin the epoch
        with pytest.raises(ArgumentError, match=r"seed 5 -> 6"):
            loader.load_state_dict(wrong)
        assert [b["index"].tolist() for b in loader] == \
            [b["index"].tolist() for b in make(seed=6)], "the refused cursor left no trace"


def test_a_dataset_changed_under_its_length_index_gets_a_new_one(tmp_path: Path) -> None:
    """The index is named by the manifest it was built from: shards and manifest replaced in
    place (as many documents, other lengths) are planned by a new index, never the old one."""
    for name, words in (("old", "a"), ("new", "bb cc dd")):
        (tmp_path / f"{name}.txt").write_text("".join(f"{words} {i}\n" for i in range(40)))
        convert("text", tmp_path / f"{name}.txt", tmp_path / name, "--tokenizer", "bytes")
    live = tmp_path / "live"
    shutil.copytree(tmp_path / "old", live)
    with dp.TokenLoader(live, max_tokens=64) as loader:
        list(loader)
    for path in (tmp_path / "new").iterdir():
        shutil.copy(path, live / path.name)
    with dp.TokenLoader(live, max_tokens=64) as loader:
        got = Counter(t for b in loader for t in _real_tokens(b))
    assert got == _dataset_tokens(tmp_path / "new")
    assert len(list(live.glob(".datapipe-length-index-*.npy"))) == 2


@pytest.mark.parametrize(("num_workers", "ahead"), [(0, False), (1, True)])
def test_windows_are_planned_ahead_only_with_workers(tmp_path: Path, num_workers: int,
                                                     ahead: bool) -> None:
    write_documents(tmp_path / "docs", [8] * 40)
    with dp.TokenLoader(tmp_path / "docs", max_tokens=16, plan_window=8,
                        num_workers=num_workers) as loader:
        assert loader._epoch_start(0).windows.ahead is ahead
