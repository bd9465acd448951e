"""DatasetWriter writes captions as `datapipe convert images --tokenizer` does: the tokenizer's
own ids of each caption (a tokenizers.Tokenizer or a transformers tokenizer), several per
image, or ids made elsewhere; the manifest records the tokenizer, and a Loader reads them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer

import datapipe as dp
from datapipe.errors import ArgumentError, DataError
from datapipe.format import Dataset
from tests.captions_data import caption, clip_style_tokenizer
from tests.imagegen import jpeg_bytes, noise_image


@pytest.fixture(scope="module")
def tokenizer_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return clip_style_tokenizer(tmp_path_factory.mktemp("tok"))


def _captions_of(out: Path) -> list[list[list[int]]]:
    with Dataset(out) as ds:
        return [[p.tolist() for p in np.split(ds[i]["caption_ids"],
                                              np.cumsum(ds[i]["caption_lengths"])[:-1])]
                for i in range(len(ds))]


def _write(out: Path, values: list, **kwargs: object) -> dp.Manifest:
    with dp.DatasetWriter(out, {"image": "jpeg", "caption": "captions"}, **kwargs) as writer:
        for n, value in enumerate(values):
            writer.write({"image": jpeg_bytes(noise_image(40, 32, n)), "caption": value})
    return writer.manifest


def test_the_writer_stores_a_tokenizers_own_ids_and_the_loader_reads_them(
        tmp_path: Path, tokenizer_path: Path) -> None:
    tok = Tokenizer.from_file(str(tokenizer_path))
    values = [caption(0), [caption(1), caption(2), caption(3)], caption(4, words=30)]
    manifest = _write(tmp_path / "out", values, tokenizer=tok, caption_max_tokens=12)
    cut = Tokenizer.from_file(str(tokenizer_path))
    cut.enable_truncation(12)
    assert _captions_of(tmp_path / "out") == [
        [cut.encode(t).ids for t in (v if isinstance(v, list) else [v])] for v in values]
    assert manifest.tokenizer["eos_id"] == tok.token_to_id("<|endoftext|>")
    texts = [t for v in values for t in (v if isinstance(v, list) else [v])]
    whole = [len(tok.encode(t).ids) for t in texts]
    assert manifest.stats["captions"] == {"captions": 5, "truncated": sum(n > 12 for n in whole),
                                          "longest": min(max(whole), 12)}
    with dp.Loader(tmp_path / "out", batch_size=3, num_workers=0,
                   transform=dp.image.CenterCrop(16), captions="openclip") as loader:
        batch = next(iter(loader))
    assert batch["input_ids"].shape == (3, 77)


def test_a_transformers_tokenizer_and_ids_made_elsewhere(tmp_path: Path,
                                                         tokenizer_path: Path) -> None:
    from transformers import PreTrainedTokenizerFast

    hf = PreTrainedTokenizerFast(tokenizer_file=str(tokenizer_path), pad_token="<|endoftext|>",
                                 eos_token="<|endoftext|>", bos_token="<|startoftext|>")
    manifest = _write(tmp_path / "hf", [caption(n) for n in range(3)], tokenizer=hf)
    assert _captions_of(tmp_path / "hf") == [[hf(caption(n))["input_ids"]] for n in range(3)]
    assert manifest.tokenizer["pad_id"] == hf.pad_token_id
    _write(tmp_path / "ids", [[5, 6, 7], [[1, 2], [3]]])
    assert _captions_of(tmp_path / "ids") == [[[5, 6, 7]], [[1, 2], [3]]]


def test_a_value_that_is_no_caption_is_refused_naming_sample_and_column(
        tmp_path: Path, tokenizer_path: Path) -> None:
    tok = Tokenizer.from_file(str(tokenizer_path))
    with dp.DatasetWriter(tmp_path / "out", {"image": "jpeg", "caption": "captions"},
                          tokenizer=tok) as writer:
        writer.write({"image": jpeg_bytes(noise_image(40, 32, 0)), "caption": caption(0)})
        with pytest.raises(DataError, match=r"sample 1, column 'caption': a caption is a "
                           "string, a list of captions or of ids, got int 7"):
            writer.write({"image": jpeg_bytes(noise_image(40, 32, 1)), "caption": 7})
    assert writer.manifest.stats["captions"]["captions"] == 1  # the refused one not counted
    with pytest.raises(ArgumentError, match="go with a column of type 'captions'"):
        dp.DatasetWriter(tmp_path / "x", {"image": "jpeg"}, tokenizer=tok)


def test_parts_merge_their_caption_counts(tmp_path: Path, tokenizer_path: Path) -> None:
    tok = Tokenizer.from_file(str(tokenizer_path))
    for part in range(2):
        _write(tmp_path / "out", [caption(part * 3 + n, words=3 + part * 5) for n in range(3)],
               tokenizer=tok, part=part, parts=2)
    merged = dp.merge_parts(tmp_path / "out")
    assert merged.stats["captions"]["captions"] == 6
    assert merged.stats["captions"]["longest"] == max(map(len, (
        c[0] for c in _captions_of(tmp_path / "out"))))
    assert merged.tokenizer["eos_id"] == tok.token_to_id("<|endoftext|>")
