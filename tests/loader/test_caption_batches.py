"""Batches of images with their captions: `input_ids` / `attention_mask` collated in real worker
processes from the stored ids, one caption drawn per sample per epoch as a pure function of
(seed, epoch, index) — uniform over epochs, the same after a resume at any step, in a mixture
too — and presets shaped as OpenCLIP, CLIP and SigLIP read them."""

from __future__ import annotations

import collections
from pathlib import Path

import numpy as np
import pytest
import torch

import datapipe as dp
from datapipe.errors import ArgumentError, DataError
from datapipe.format import Dataset
from tests.captions_data import caption, clip_style_tokenizer, write_captioned_tar
from tests.conftest import convert
from tests.loader.helpers import check_resume_at_every_step

CROP = dp.image.RandomResizedCrop(16) | dp.image.HorizontalFlip()


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return clip_style_tokenizer(tmp_path_factory.mktemp("tok"))


def _dataset(folder: Path, tokenizer: Path, captions: list, first: int = 0) -> Path:
    write_captioned_tar(folder / "src" / "a.tar", captions, first)
    convert("images", folder / "src" / "a.tar", folder / "out", "--short-side", 24,
            "--workers", 1, "--tokenizer", tokenizer)
    return folder / "out"


@pytest.fixture(scope="module")
def five(tmp_path_factory: pytest.TempPathFactory, tokenizer: Path) -> Path:
    """14 images with five captions each, of different lengths."""
    return _dataset(tmp_path_factory.mktemp("five"), tokenizer,
                    [[caption(n * 5 + k, words=2 + (n + k) % 7) for k in range(5)]
                     for n in range(14)])


def _stored(path: Path) -> dict[int, list[list[int]]]:
    with Dataset(path) as ds:
        out = {}
        for i in range(len(ds)):
            ends = np.cumsum(ds[i]["caption_lengths"])[:-1]
            out[i] = [p.tolist() for p in np.split(ds[i]["caption_ids"], ends)]
        return out


def _real_ids(batch: dict) -> list[list[int]]:
    return [row[mask.bool()].tolist() for row, mask in zip(batch["input_ids"],
                                                           batch["attention_mask"], strict=True)]


def test_workers_collate_the_drawn_caption_padded_to_the_batch_longest(five: Path) -> None:
    stored = _stored(five)
    with dp.Loader(five, batch_size=4, num_workers=2, transform=CROP, seed=3) as loader:
        batches = list(loader)
    assert len(batches) == 4
    for batch in batches:
        ids, mask = batch["input_ids"], batch["attention_mask"]
        assert ids.dtype == mask.dtype == torch.int64 and ids.shape == mask.shape
        assert ids.shape[0] == batch["image"].shape[0]
        drawn = [stored[int(i)][int(c)] for i, c in zip(batch["index"],
                                                        batch["caption_index"], strict=True)]
        assert _real_ids(batch) == drawn
        assert ids.shape[1] == max(map(len, drawn))  # padding="longest"
        assert bool((mask.sum(1) == torch.tensor([len(d) for d in drawn])).all())


def test_presets_shape_batches_as_each_stack_reads_them(five: Path, tokenizer: Path) -> None:
    from tokenizers import Tokenizer

    eos = Tokenizer.from_file(str(tokenizer)).token_to_id("<|endoftext|>")
    for preset, width, pad in (("openclip", 77, 0), ("clip", 77, eos), ("siglip", 64, eos)):
        with dp.Loader(five, batch_size=5, num_workers=0, transform=CROP,
                       captions=preset) as loader:
            batch = next(iter(loader))
        assert batch["input_ids"].shape == (5, width), preset
        assert bool((batch["input_ids"][batch["attention_mask"] == 0] == pad).all()), preset
    with pytest.raises(ArgumentError, match="preset 'siglip' sets context_length=64, but "
                       "context_length=77 was given"):
        dp.Loader(five, batch_size=5, num_workers=0, transform=CROP,
                  captions=dp.Captions(preset="siglip", context_length=77))


def test_a_caption_longer_than_the_context_is_cut_keeping_end_of_text(five: Path,
                                                                      tokenizer: Path) -> None:
    from tokenizers import Tokenizer

    eos = Tokenizer.from_file(str(tokenizer)).token_to_id("<|endoftext|>")
    stored = _stored(five)
    with dp.Loader(five, batch_size=14, num_workers=0, transform=CROP,
                   captions=dp.Captions(context_length=4, padding="max_length")) as loader:
        batch = next(iter(loader))
    assert batch["input_ids"].shape == (14, 4)
    for row, i, c in zip(_real_ids(batch), batch["index"], batch["caption_index"], strict=True):
        whole = stored[int(i)][int(c)]
        assert row == (whole if len(whole) <= 4 else whole[:3] + [eos])


def test_the_five_caption_draw_is_uniform_over_epochs(five: Path) -> None:
    counts: collections.Counter = collections.Counter()
    per_sample = collections.defaultdict(set)
    with dp.Loader(five, batch_size=14, num_workers=0, transform=CROP, seed=1) as loader:
        for epoch in range(60):
            loader.set_epoch(epoch)
            for batch in loader:
                for i, c in zip(batch["index"].tolist(), batch["caption_index"].tolist(),
                                strict=True):
                    counts[c] += 1
                    per_sample[i].add(c)
    assert sorted(counts) == [0, 1, 2, 3, 4]
    expected = 60 * 14 / 5  # 168 each; a binomial's sd is ~11.6
    assert all(abs(n - expected) < 45 for n in counts.values()), counts
    assert all(len(seen) == 5 for seen in per_sample.values())  # every caption of each image


def test_the_draw_is_exact_on_resume_at_every_step(five: Path) -> None:
    check_resume_at_every_step(lambda: dp.Loader(five, batch_size=4, num_workers=1,
                                                 transform=CROP, seed=7), epoch=3)


def test_a_mixture_of_captioned_datasets_resumes_exactly(tmp_path: Path, five: Path,
                                                         tokenizer: Path) -> None:
    other = _dataset(tmp_path / "one", tokenizer, [caption(n) for n in range(100, 109)], 100)
    stored = {0: _stored(five), 1: _stored(other)}

    def make() -> dp.Loader:
        return dp.Loader({"five": five, "one": other}, batch_size=5, num_workers=0,
                         transform=CROP, seed=2, weights={"five": 0.6, "one": 0.4},
                         captions="openclip")

    with make() as loader:
        for batch in loader:
            drawn = [stored[int(s)][int(i)][int(c)] for s, i, c in zip(
                batch["source"], batch["index"], batch["caption_index"], strict=True)]
            assert _real_ids(batch) == drawn and batch["input_ids"].shape[1] == 77
    check_resume_at_every_step(make, epoch=1)


def test_captions_that_cannot_be_read_are_refused_in_one_line(tmp_path: Path, five: Path,
                                                              image_folder: Path) -> None:
    convert("images", image_folder, tmp_path / "plain", "--short-side", 24, "--workers", 1)
    with pytest.raises(ArgumentError, match="plain has no captions"):
        dp.Loader(tmp_path / "plain", batch_size=4, num_workers=0, transform=CROP,
                  captions="openclip")
    with dp.Loader(tmp_path / "plain", batch_size=4, num_workers=0, transform=CROP) as loader:
        assert "input_ids" not in next(iter(loader))  # none stored, none asked: none given
    other_tok = clip_style_tokenizer(tmp_path / "tok2", vocab_size=280)
    other = _dataset(tmp_path / "o", other_tok, [caption(n) for n in range(4)])
    with pytest.raises(DataError, match="tokenized with another tokenizer"):
        dp.Loader([five, other], batch_size=4, num_workers=0, transform=CROP)
    with dp.Loader(five, batch_size=4, num_workers=0, transform=CROP,
                   captions=False) as loader:
        assert "input_ids" not in next(iter(loader))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_cuda_the_caption_rows_arrive_with_the_images(five: Path) -> None:
    def batches(device: str) -> list[dict]:
        with dp.Loader(five, batch_size=4, num_workers=1, transform=CROP, seed=5,
                       captions="openclip", device=device) as loader:
            return [{k: v.cpu() if isinstance(v, torch.Tensor) else v for k, v in b.items()}
                    | {"device": b["input_ids"].device.type} for b in loader]

    on_gpu, on_cpu = batches("cuda"), batches("cpu")
    assert all(b["device"] == "cuda" for b in on_gpu)
    for got, want in zip(on_gpu, on_cpu, strict=True):
        assert torch.equal(got["input_ids"], want["input_ids"])
        assert torch.equal(got["attention_mask"], want["attention_mask"])
