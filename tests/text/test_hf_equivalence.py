"""A tiny random Llama (transformers, float64, no download) fed TokenLoader's "hf" preset
computes what it computes on each document alone, and what transformers' own padding-free
collator gives it; two controls show what breaks the equality."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import datapipe as dp
from tests.text.helpers import write_documents

transformers = pytest.importorskip("transformers")

LENGTHS = [7, 23, 1, 40, 12, 5, 31, 18]
# How close in float64: transformers' eager attention takes its softmax in float32
# (modeling_llama.eager_attention_forward), whose sum over a row of 137 keys rounds otherwise
# than over a row of 7 (about 1e-8); sdpa stays in float64.
TOLERANCE = {"eager": 1e-7, "sdpa": 1e-10}
ATTENTION = list(TOLERANCE)
BOOKKEEPING = ("num_real_tokens", "num_loss_tokens", "efficiency", "index", "is_padding")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[np.ndarray]]:
    path = tmp_path_factory.mktemp("hf") / "docs"
    return path, write_documents(path, LENGTHS)


def tiny_llama(attention: str) -> torch.nn.Module:
    config = transformers.LlamaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
        use_cache=False, attn_implementation=attention)
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config).double().eval()


def one_batch(path: Path, **options: object) -> dict:
    with dp.TokenLoader(path, max_tokens=4096, shuffle=False, **options) as loader:
        batches = list(loader)
    assert len(batches) == 1
    return batches[0]


def model_inputs(batch: dict) -> dict:
    return {k: v for k, v in batch.items() if k not in BOOKKEEPING}


def per_document_logits(model: torch.nn.Module, documents: list[np.ndarray]) -> torch.Tensor:
    with torch.no_grad():
        return torch.cat([model(input_ids=torch.from_numpy(d.astype(np.int64))[None]).logits[0]
                          for d in documents])


@pytest.mark.parametrize("attention", ATTENTION)
def test_packed_logits_equal_each_document_alone(corpus, attention: str) -> None:
    path, documents = corpus
    model = tiny_llama(attention)
    batch = one_batch(path, preset="hf")
    assert batch["input_ids"].shape == (1, sum(LENGTHS))
    with torch.no_grad():
        packed = model(**model_inputs(batch)).logits[0]
    torch.testing.assert_close(packed, per_document_logits(model, documents), rtol=0,
                               atol=TOLERANCE[attention])


@pytest.mark.parametrize("attention", ATTENTION)
def test_control_without_position_ids_attends_across_documents(corpus, attention: str) -> None:
    path, documents = corpus
    model = tiny_llama(attention)
    batch = one_batch(path, preset="hf")
    with torch.no_grad():
        packed = model(input_ids=batch["input_ids"]).logits[0]
    assert (packed - per_document_logits(model, documents)).abs().max() > 1e-3


@pytest.mark.parametrize("attention", ATTENTION)
def test_control_fixed_rows_with_an_attention_mask_attend_across_documents(
        corpus, attention: str) -> None:
    """The fixed layout's attention_mask only hides the padding: documents sharing a row see
    each other. cu_seqlens / position_ids are what keep them apart."""
    path, documents = corpus
    model = tiny_llama(attention)
    batch = one_batch(path, layout="fixed", seq_len=64)
    with torch.no_grad():
        logits = model(input_ids=batch["input_ids"],
                       attention_mask=batch["attention_mask"]).logits
    flat = logits.reshape(-1, logits.shape[-1])[batch["attention_mask"].flatten().bool()]
    expected = per_document_logits(model, [documents[i] for i in batch["index"].tolist()
                                            if i >= 0])
    assert (flat - expected).abs().max() > 1e-3


def reference_loss(model: torch.nn.Module, documents: list[np.ndarray]) -> torch.Tensor:
    """Every document alone, HF labels = input_ids: summed token losses / counted targets."""
    total, count = torch.zeros((), dtype=torch.float64), 0
    with torch.no_grad():
        for d in documents:
            ids = torch.from_numpy(d.astype(np.int64))[None]
            logits = model(input_ids=ids).logits[0, :-1]
            total += torch.nn.functional.cross_entropy(logits, ids[0, 1:], reduction="sum")
            count += len(d) - 1
    return total / count


def hf_shifted_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """transformers' causal-LM loss (shift inside the row, mean over targets), in float64:
    the model's own `.loss` upcasts to float32 only."""
    return torch.nn.functional.cross_entropy(logits[0, :-1], labels[0, 1:], ignore_index=-100)


@pytest.mark.parametrize("attention", ATTENTION)
def test_loss_through_the_hf_preset_equals_the_reference(corpus, attention: str) -> None:
    path, documents = corpus
    model = tiny_llama(attention)
    batch = one_batch(path, preset="hf")
    with torch.no_grad():
        out = model(**model_inputs(batch))
    reference = reference_loss(model, documents)
    torch.testing.assert_close(hf_shifted_loss(out.logits, batch["labels"]), reference,
                               rtol=0, atol=TOLERANCE[attention])
    torch.testing.assert_close(out.loss, reference.float(), rtol=1e-6, atol=0)
    assert batch["num_loss_tokens"] == sum(n - 1 for n in LENGTHS)
    assert batch["num_real_tokens"] == sum(LENGTHS)


def test_shifted_labels_as_hf_labels_are_shifted_twice(corpus) -> None:
    """The default labels are already shifted: passed as HF `labels` they are shifted again
    and wrong; passed as `shift_labels` they are right (what docs/text.md tells)."""
    path, documents = corpus
    model = tiny_llama("sdpa")
    batch = one_batch(path, batch_dim=True, add_fields=("shift_labels",))
    inputs = {"input_ids": batch["input_ids"], "position_ids": batch["position_ids"]}
    with torch.no_grad():
        wrong = model(**inputs, labels=batch["labels"]).loss
        right = model(**inputs, labels=batch["labels"], shift_labels=batch["shift_labels"]).loss
    reference = reference_loss(model, documents).float()
    torch.testing.assert_close(right, reference, rtol=1e-6, atol=0)
    assert abs(wrong - reference) > 1e-3


def test_num_loss_tokens_is_the_trainers_count(corpus, tmp_path: Path) -> None:
    path, _ = corpus
    trainer = transformers.Trainer(
        model=tiny_llama("eager"),
        args=transformers.TrainingArguments(output_dir=str(tmp_path), report_to=[],
                                            use_cpu=True))
    with dp.TokenLoader(path, max_tokens=64, preset="hf", seed=1) as loader:
        batches = list(loader)
    for batch in batches:
        assert int(trainer._get_num_items_in_batch([batch], torch.device("cpu"))) == \
            batch["num_loss_tokens"]
    assert loader.loss_tokens_seen == sum(b["num_loss_tokens"] for b in batches)


def test_fields_equal_transformers_flattening_collator(corpus) -> None:
    path, documents = corpus
    batch = one_batch(path, preset="hf")
    collator = transformers.DataCollatorWithFlattening(return_flash_attn_kwargs=True,
                                                       return_seq_idx=True)
    theirs = collator([{"input_ids": documents[i].tolist()} for i in batch["index"].tolist()])
    assert set(theirs) <= set(batch)
    for key, value in theirs.items():
        ours = batch[key]
        if isinstance(value, torch.Tensor):
            assert ours.dtype == value.dtype and torch.equal(ours, value), key
        else:
            assert ours == value and type(ours) is type(value), key
