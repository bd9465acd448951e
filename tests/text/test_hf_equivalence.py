"""A tiny random Llama (transformers, float64, no download), built with the config's defaults
(`use_cache=True` among them), fed TokenLoader's "hf" preset as it is, computes what it
computes on each document alone and on padded rows, and what transformers' own padding-free
collator gives it; controls show what breaks the equality."""

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
    """Default LlamaConfig but for its sizes: use_cache is left at True, as users build it."""
    config = transformers.LlamaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
        attn_implementation=attention)
    assert config.use_cache
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


def padded_loss(model: torch.nn.Module, batch: dict) -> torch.Tensor:
    """HF's causal-LM loss over padded rows (labels="hf"), in float64."""
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    return torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]),
                                             batch["labels"][:, 1:].reshape(-1),
                                             ignore_index=-100)


def loss_and_gradients(model: torch.nn.Module, loss_of) -> tuple[torch.Tensor, list]:
    model.zero_grad()
    loss = loss_of()
    loss.backward()
    return loss.detach(), [p.grad.clone() for p in model.parameters()]


@pytest.mark.parametrize("attention", ATTENTION)
def test_a_default_built_model_in_training_gets_the_padded_loss(corpus, attention) -> None:
    """A training forward of a model left at use_cache=True: without the batch's
    use_cache=False it builds a cache, stops reading documents from position_ids, and its
    loss and gradients are off (the control at the end)."""
    path, _ = corpus
    model = tiny_llama(attention).train()
    packed = one_batch(path, preset="hf")
    padded = one_batch(path, layout="padded", labels="hf")
    reference, expected = loss_and_gradients(model, lambda: padded_loss(model, padded))
    loss, grads = loss_and_gradients(model, lambda: hf_shifted_loss(
        model(**model_inputs(packed)).logits, packed["labels"]))
    torch.testing.assert_close(loss, reference, rtol=1e-12, atol=0)
    for got, want in zip(grads, expected, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-12)
    assert packed["use_cache"] is False  # a constant: the batch holds no tensor for it
    without = {k: v for k, v in model_inputs(packed).items() if k != "use_cache"}
    crossing, _ = loss_and_gradients(model, lambda: hf_shifted_loss(
        model(**without).logits, packed["labels"]))
    assert abs(crossing - reference) / reference > 1e-6, "the control: a cache crosses documents"


def test_shifted_labels_as_hf_labels_are_shifted_twice(corpus) -> None:
    """The default labels are already shifted: passed as HF `labels` they are shifted again
    and wrong; passed as `shift_labels` they are right (what docs/text.md tells)."""
    path, documents = corpus
    model = tiny_llama("sdpa")
    batch = one_batch(path, batch_dim=True, add_fields=("shift_labels", "use_cache"))
    inputs = {"input_ids": batch["input_ids"], "position_ids": batch["position_ids"],
              "use_cache": batch["use_cache"]}
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


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_flex_attention_on_cuda_gets_the_padded_loss(corpus) -> None:
    """transformers' flex_attention builds its block mask from position_ids under the same
    no-cache condition as eager and sdpa (float32: a cross-document loss is 1e-4 off)."""
    path, _ = corpus
    config = tiny_llama("flex_attention").config
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).cuda().train()
    packed = {k: v.cuda() if isinstance(v, torch.Tensor) else v
              for k, v in model_inputs(one_batch(path, preset="hf")).items()}
    padded = {k: v.cuda() if isinstance(v, torch.Tensor) else v
              for k, v in one_batch(path, layout="padded", labels="hf").items()}
    with torch.no_grad():
        reference = padded_loss(model, padded)
        loss = hf_shifted_loss(model(**packed).logits, packed["labels"])
        crossing = hf_shifted_loss(model(**{k: v for k, v in packed.items()
                                            if k != "use_cache"}).logits, packed["labels"])
    torch.testing.assert_close(loss, reference, rtol=1e-5, atol=0)
    assert abs(crossing - reference) / reference > 5e-5
