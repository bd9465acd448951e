"""VLMLoader: packed image conversations equal, in a tiny random Qwen2-VL's loss, to the
processor's own expansion with one sample per padded row; budgets, overflow, resume, ranks."""

from __future__ import annotations

import io
import itertools
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import datapipe as dp
from datapipe.errors import ArgumentError
from datapipe.format.concat import open_dataset
from tests.conftest import convert
from tests.loader.helpers import (
    check_cuda_batches_are_the_cpu_batches,
    check_fields_view_batch_buffers,
    check_resume_at_every_step,
    indices_of,
)
from tests.vlm_data import SPECIAL, TEMPLATE, make_llava, make_tokenizer

IMAGE_ID, PAD_ID = SPECIAL.index("<|image_pad|>"), SPECIAL.index("<|endoftext|>")


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """(tokenizer folder, the LLaVA JSON, the converted dataset)."""
    root = tmp_path_factory.mktemp("vlm")
    tokenizer = make_tokenizer(root / "tok")
    src = make_llava(root / "src", count=40)
    convert("vlm", src, root / "out", "--tokenizer", tokenizer, "--workers", "1")
    return tokenizer, src, root / "out"


def _tiny_qwen2_vl(vocab: int):
    from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration

    torch.manual_seed(0)
    config = Qwen2VLConfig(
        text_config={"vocab_size": vocab, "hidden_size": 32, "intermediate_size": 64,
                     "num_hidden_layers": 2, "num_attention_heads": 4,
                     "num_key_value_heads": 2, "use_cache": False,
                     "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0,
                                         "mrope_section": [2, 1, 1]},
                     "bos_token_id": None, "eos_token_id": None},
        vision_config={"depth": 1, "embed_dim": 32, "hidden_size": 32, "num_heads": 2,
                       "mlp_ratio": 2},
        image_token_id=IMAGE_ID, video_token_id=IMAGE_ID + 1,
        vision_start_token_id=SPECIAL.index("<|vision_start|>"), attn_implementation="eager")
    return Qwen2VLForConditionalGeneration(config).double().eval()


def _loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The causal LM loss as transformers computes it (labels shifted one left, mean over
    the targets that count), in the logits' own precision."""
    return torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1),
                                             labels[:, 1:].flatten(), ignore_index=-100)


def _messages(record: dict) -> list[dict]:
    roles = {"human": "user", "gpt": "assistant", "system": "system"}
    messages = []
    for turn in record["conversations"]:
        pieces = turn["value"].split("<image>")
        items = [{"type": "text", "text": pieces[0]}] if pieces[0] else []
        for piece in pieces[1:]:
            items.append({"type": "image"})
            if piece:
                items.append({"type": "text", "text": piece})
        messages.append({"role": roles[turn["from"]], "content": items})
    return messages


def _processor_rows(tokenizer: Path, records: list[dict], dataset: Path,
                    indices: list[int]) -> dict:
    """The samples as transformers makes them: the chat template's text with each
    <|image_pad|> repeated grid.prod() // merge² times (Qwen2VLProcessor's rule), tokenized,
    Qwen2VLImageProcessor's grids of the stored images, one sample per row padded."""
    from transformers import PreTrainedTokenizerFast, Qwen2VLImageProcessor

    tok = PreTrainedTokenizerFast(tokenizer_file=str(tokenizer / "tokenizer.json"),
                                  chat_template=TEMPLATE)
    images = Qwen2VLImageProcessor()
    rows, grids, pixels = [], [], []
    with open_dataset(dataset) as ds:
        for i in indices:
            stored = ds[i]
            ends = np.cumsum(stored["image_nbytes"])
            photos = [Image.open(io.BytesIO(stored["images"][e - n:e].tobytes())).convert("RGB")
                      for n, e in zip(stored["image_nbytes"], ends, strict=True)]
            grid = images(images=photos, return_tensors="pt") if photos else None
            messages = _messages(records[i])
            text = tok.apply_chat_template(messages, tokenize=False)
            pieces = text.split("<|image_pad|>")
            counts = (grid["image_grid_thw"].prod(-1) // 4).tolist() if photos else []
            text = pieces[0] + "".join("<|image_pad|>" * n + p
                                       for n, p in zip(counts, pieces[1:], strict=True))
            ids = tok(text, add_special_tokens=False)["input_ids"]
            out = tok.apply_chat_template(messages, tokenize=True, return_dict=True,
                                          return_assistant_tokens_mask=True)
            mask, unexpanded = out["assistant_masks"], np.asarray(out["input_ids"])
            repeat = np.where(unexpanded == IMAGE_ID, 0, 1)
            repeat[unexpanded == IMAGE_ID] = counts
            mask = np.repeat(np.asarray(mask), repeat)
            rows.append((np.asarray(ids), np.where(mask == 1, ids, -100)))
            if photos:
                grids.append(grid["image_grid_thw"])
                pixels.append(grid["pixel_values"])
    width = max(len(ids) for ids, _ in rows)
    batch = {"input_ids": torch.full((len(rows), width), PAD_ID),
             "labels": torch.full((len(rows), width), -100),
             "attention_mask": torch.zeros((len(rows), width), dtype=torch.long)}
    for r, (ids, labels) in enumerate(rows):
        batch["input_ids"][r, :len(ids)] = torch.from_numpy(ids)
        batch["labels"][r, :len(ids)] = torch.from_numpy(labels)
        batch["attention_mask"][r, :len(ids)] = 1
    batch["mm_token_type_ids"] = (batch["input_ids"] == IMAGE_ID).long()
    batch["image_grid_thw"] = torch.cat(grids)
    batch["processor_pixel_values"] = torch.cat(pixels)
    return batch


def test_a_packed_batch_gives_the_loss_of_the_processor_with_padding(data):
    tokenizer, src, dataset = data
    records = json.loads(src.read_text())
    with dp.VLMLoader(dataset, 4096, seed=3) as loader:
        batch = next(iter(loader))
    indices = batch["index"].tolist()
    assert len(indices) > 10 and len(batch["image_grid_thw"]) > 5
    reference = _processor_rows(tokenizer, records, dataset, indices)
    # The expansion, the grids and the labels are the processor's, sample by sample.
    real = reference["attention_mask"].bool()
    assert torch.equal(batch["input_ids"][0], reference["input_ids"][real])
    first = torch.zeros_like(real)
    first[:, 0] = True
    assert torch.equal(batch["labels"][0],
                       reference["labels"].masked_fill(first, -100)[real])
    assert torch.equal(batch["mm_token_type_ids"][0], reference["mm_token_type_ids"][real])
    assert torch.equal(batch["image_grid_thw"], reference["image_grid_thw"])
    # Pixels: the processor's resize (PIL, antialiased) and ours agree closely, not bit for
    # bit (docs/patches.md); the loss is compared on the same pixels.
    assert (batch["pixel_values"] - reference["processor_pixel_values"]).abs().mean() < 0.05
    pixels = batch["pixel_values"].double()
    model = _tiny_qwen2_vl(400)
    # transformers' own loss casts the logits to float32; the same loss in float64 here.
    with torch.no_grad():
        packed = _loss(model(input_ids=batch["input_ids"], position_ids=batch["position_ids"],
                             pixel_values=pixels, image_grid_thw=batch["image_grid_thw"],
                             mm_token_type_ids=batch["mm_token_type_ids"],
                             use_cache=False).logits, batch["labels"])
        padded = _loss(model(input_ids=reference["input_ids"],
                             attention_mask=reference["attention_mask"], pixel_values=pixels,
                             image_grid_thw=reference["image_grid_thw"],
                             mm_token_type_ids=reference["mm_token_type_ids"],
                             use_cache=False).logits, reference["labels"])
    assert abs(packed.item() - padded.item()) < 1e-10, (packed.item(), padded.item())


def test_the_model_computes_the_same_positions(data):
    """position_ids' M-RoPE rows equal get_rope_index's on each sample alone."""
    _, _, dataset = data
    model = _tiny_qwen2_vl(400)
    with dp.VLMLoader(dataset, 2048, seed=1) as loader:
        batch = next(iter(loader))
    cu, grids = batch["cu_seqlens"].tolist(), batch["image_grid_thw"]
    used = 0
    for s, e in itertools.pairwise(cu):
        ids = batch["input_ids"][:, s:e]
        types = batch["mm_token_type_ids"][:, s:e]
        n = int((ids == IMAGE_ID).sum())
        count = 0
        while n:
            n -= int(grids[used + count].prod()) // 4
            count += 1
        rope, _ = model.model.get_rope_index(ids, types, grids[used:used + count]
                                             if count else None)
        used += count
        assert torch.equal(batch["position_ids"][1:, :, s:e], rope)
        assert torch.equal(batch["position_ids"][0, 0, s:e], torch.arange(e - s))


def test_every_sample_once_within_the_budget_never_split(data):
    _, _, dataset = data
    with dp.VLMLoader(dataset, 1024, seed=0) as loader:
        lengths = loader.lengths
        batches = list(loader)
    assert sorted(indices_of(batches)) == list(range(40))
    for batch in batches:
        assert batch["num_real_tokens"] <= 1024
        sizes = np.diff(batch["cu_seqlens"].numpy())
        assert sizes.tolist() == lengths[batch["index"].numpy()].tolist()
        assert batch["input_ids"].shape[1] == sizes.sum()
        assert int(batch["image_grid_thw"].prod(-1).sum()) == batch["pixel_values"].shape[0]


def test_a_sample_over_the_budget_is_refused_or_dropped(data):
    _, _, dataset = data
    with dp.VLMLoader(dataset, 100_000) as loader:
        lengths = loader.lengths
    budget = int(np.sort(lengths)[-3])  # the two longest do not fit
    with pytest.raises(ArgumentError, match=f"more than max_tokens={budget - 1}"):
        dp.VLMLoader(dataset, budget - 1)
    with dp.VLMLoader(dataset, budget, overflow="drop") as loader:
        seen = indices_of(list(loader))
        assert loader.samples_dropped == int((lengths > budget).sum())
    assert sorted(seen) == np.flatnonzero(lengths <= budget).tolist()


def test_resume_at_every_step_with_workers(data):
    _, _, dataset = data
    check_resume_at_every_step(lambda: dp.VLMLoader(dataset, 1024, seed=5, num_workers=2))


def test_batch_fields_view_the_shared_buffers_so_a_gpu_copy_reads_them_in_place(data):
    _, _, dataset = data
    with dp.VLMLoader(dataset, 1024, seed=5, num_workers=2) as loader:
        check_fields_view_batch_buffers(loader, ("pixel_values", "input_ids", "labels",
                                                 "position_ids"))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.cuda
def test_on_cuda_batches_are_the_cpu_batches(data):
    _, _, dataset = data
    check_cuda_batches_are_the_cpu_batches(
        lambda **device: dp.VLMLoader(dataset, 1024, seed=5, num_workers=2, **device))


def test_ranks_share_the_epoch(data):
    _, _, dataset = data
    seen = []
    steps = set()
    for rank in range(3):
        with dp.VLMLoader(dataset, 700, rank=rank, world_size=3, seed=2) as loader:
            batches = list(loader)
        steps.add(len(batches))
        seen += [i for b in batches if not b["is_padding"].all() for i in
                 b["index"][~b["is_padding"]].tolist()]
    assert len(steps) == 1
    assert sorted(seen) == list(range(40))


def test_text_only_sft_loads_as_samples_without_images(data, tmp_path: Path):
    tokenizer, _, _ = data
    lines = [{"messages": [{"role": "user", "content": f"what is {i}"},
                           {"role": "assistant", "content": "a cat on the mat"}]}
             for i in range(6)]
    (tmp_path / "chat.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    convert("text", tmp_path / "chat.jsonl", tmp_path / "out", "--tokenizer", tokenizer)
    with dp.VLMLoader(tmp_path / "out", 512) as loader:
        batch = next(iter(loader))
    assert batch["pixel_values"].shape == (0, 1176) and len(batch["image_grid_thw"]) == 0
    assert batch["num_loss_tokens"] > 0 and not batch["mm_token_type_ids"].any()


def test_token_loader_refuses_image_conversations(data):
    _, _, dataset = data
    with pytest.raises(dp.DataError, match=r"read them with dp\.VLMLoader"):
        dp.TokenLoader(dataset, 1024)


@pytest.fixture(scope="module")
def chat_sft(data, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Text-only chat SFT (`convert text`) with the same tokenizer."""
    tokenizer, _, _ = data
    root = tmp_path_factory.mktemp("chat")
    lines = [{"messages": [{"role": "user", "content": f"what is {i}"},
                           {"role": "assistant", "content": "a cat on the mat " * (i % 4 + 1)}]}
             for i in range(30)]
    (root / "chat.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    convert("text", root / "chat.jsonl", root / "out", "--tokenizer", tokenizer)
    return root / "out"


def test_a_mixture_of_text_only_and_image_sft(data, chat_sft: Path):
    _, _, dataset = data
    paths = {"images": dataset, "text": chat_sft}
    with dp.VLMLoader(paths, 1024, weights={"images": 0.5, "text": 0.5},
                      weight_by="documents", seed=4, num_workers=2) as loader:
        batches = list(loader)
        progress = loader.progress()
    seen = {0: [], 1: []}
    for batch in batches:
        assert batch["source"].shape == batch["index"].shape
        for source, index in zip(batch["source"].tolist(), batch["index"].tolist(),
                                 strict=True):
            seen[source].append(index)
        # each image-free sample adds no image; the images are those of the image samples
        assert int(batch["image_grid_thw"].prod(-1).sum()) == batch["pixel_values"].shape[0]
    # 70 samples an epoch, half from each: the 30 text samples each once and 5 again, 35
    # of the 40 image samples
    assert len(seen[0]) == len(seen[1]) == 35
    assert set(seen[1]) == set(range(30)) and len(set(seen[0])) == 35
    assert progress["text"]["documents"] == progress["images"]["documents"] == 35
    assert any(set(b["source"].tolist()) == {0, 1} for b in batches)  # mixed in one batch
    check_resume_at_every_step(lambda: dp.VLMLoader(
        paths, 1024, weights={"images": 0.5, "text": 0.5}, weight_by="documents", seed=4))


def test_msgpack_shards_give_the_same_batches(data, tmp_path: Path):
    """The image sizes read row by row where the format keeps no offsets."""
    tokenizer, src, dataset = data
    convert("vlm", src, tmp_path / "msgpack", "--tokenizer", tokenizer, "--workers", "1",
            "--format", "msgpack")
    with dp.VLMLoader(dataset, 1024, seed=1) as arrow, \
            dp.VLMLoader(tmp_path / "msgpack", 1024, seed=1) as msgpack:
        assert np.array_equal(arrow.lengths, msgpack.lengths)
        pairs = list(zip(arrow, msgpack, strict=True))
    for a, b in pairs:
        for key, value in a.items():
            assert torch.equal(value, b[key]) if isinstance(value, torch.Tensor) else \
                value == b[key], key


def test_tokens_seen_count_handed_out_batches_and_resume(data):
    """loss_tokens_seen (the denominator of a loss summed over accumulated batches) counts
    the batches handed out, and a restored loader carries it on."""
    _, _, dataset = data
    with dp.VLMLoader(dataset, 1024, seed=6, num_workers=2, prefetch=3) as loader:
        batches = iter(loader)
        first = [next(batches) for _ in range(2)]
        assert loader.loss_tokens_seen == sum(b["num_loss_tokens"] for b in first)
        state = loader.state_dict()
        rest = list(batches)
        total = loader.loss_tokens_seen, loader.tokens_seen
    with dp.VLMLoader(dataset, 1024, seed=6) as restored:
        restored.load_state_dict(state)
        assert len(list(restored)) == len(rest)
        assert (restored.loss_tokens_seen, restored.tokens_seen) == total
