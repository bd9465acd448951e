"""The hf_train group (datapipe.suite.groups.hf_train): a transformers Llama trained on packed
and padded TokenLoader batches, per attention implementation. Without CUDA the gpu suite skips
it and says what it would measure; its jobs run end to end on the CPU with the tiny model; the
real sizes and kernels only where a CUDA device is present."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from datapipe.errors import ArgumentError
from datapipe.suite import suite
from datapipe.suite.groups import gpu, handoff, hf_train
from datapipe.suite.groups import hf_train_peers as hp
from datapipe.suite.machine import describe
from datapipe.suite.options import Options
from datapipe.suite.runner import NO_CUDA, run_group
from datapipe.suite.suite import group_report

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
DATA = Path(__file__).resolve().parents[2] / "bench-data"  # kept between runs, as the suite's


def test_without_cuda_the_gpu_suite_skips_the_group_and_says_what_it_would_measure(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for group in (gpu, handoff, hf_train):
        monkeypatch.setattr(group, "cuda_missing", lambda: NO_CUDA)
    monkeypatch.setattr(hf_train, "suite_dataset", pytest.fail)
    assert hf_train.GROUP.available(Options(("gpu",))) == NO_CUDA
    assert suite.run(Options.smoke_test(("gpu",), tmp_path / "out", data=tmp_path / "data")) == 0
    (panel,) = json.loads((tmp_path / "out" / "suite.json").read_text())["suites"]["gpu"]
    assert panel["entries"][0]["label"] == "gpu and handoff and hf_train"
    assert panel["entries"][0]["status"] == NO_CUDA
    assert f"{hf_train.GROUP.title}." in panel["job"] and panel["job"].startswith("Would measure")
    assert not (tmp_path / "out" / "hf_train.md").exists() and not (tmp_path / "data").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="on a CUDA device every row can run")
def test_without_cuda_every_attention_says_why_it_is_skipped() -> None:
    assert {attn: hp.attention_unavailable(attn, "cuda") for attn in hp.ATTENTIONS} == \
        dict.fromkeys(hp.ATTENTIONS, NO_CUDA)
    assert hp.attention_unavailable("sdpa", "cpu") is None
    assert hp.attention_unavailable("flash_attention_2", "cpu") == \
        "skipped: flash_attention_2 runs on CUDA only"
    assert hp.train(hp.TrainJob("no-such-dataset", attn="sdpa")) == {"status": NO_CUDA}


def test_flex_attention_needs_torch_2_5(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch, "__version__", "2.4.1+cu121")
    assert hp.attention_unavailable("flex_attention", "cpu") == \
        "skipped: flex_attention needs torch >= 2.5 (this is 2.4.1+cu121)"


@pytest.mark.parametrize(("field", "value"), [("model", "llama-7b"), ("attn", "flash"),
                                              ("layout", "fixed"), ("steps", 0)])
def test_a_job_with_a_wrong_setting_is_refused(field: str, value: object) -> None:
    with pytest.raises(ArgumentError, match=field):
        hp.TrainJob("tokens", **{field: value})


def test_the_model_sizes_are_named_by_their_parameter_counts() -> None:
    for name in ("llama-134m", "llama-355m"):
        with torch.device("meta"):
            model = hp.build_model(name, 30_522, 2048, "sdpa", "meta")
        assert round(hp.parameter_count(model) / 1e6) == int(name[6:-1]), name


def test_the_group_runs_end_to_end_on_the_cpu_with_the_tiny_model(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Forced onto the CPU: each row a fresh child training the tiny model on the suite's
    corpus; the rows this machine cannot run say why; the report holds every figure."""
    monkeypatch.setattr(hf_train, "DEVICE", "cpu")
    opts = Options.smoke_test(("gpu",), tmp_path, data=DATA)
    result = run_group(hf_train.GROUP, opts, describe())
    statuses = {name: outcome.status for name, outcome in result.outcomes.items()}
    assert statuses["packed-sdpa"] == statuses["padded-sdpa"] == "ok"
    assert statuses["packed-flex"] == statuses["padded-flex"] == \
        "skipped: flex_attention is measured on CUDA only"
    assert statuses["packed-fa2"].startswith(("skipped: flash_attention_2", "not installed"))
    for name in ("packed-sdpa", "padded-sdpa"):
        (run,) = result.outcomes[name].runs
        assert run["layout"] == name.split("-")[0] and run["model"] == "tiny"
        assert run["steps"] == hf_train.SMOKE["steps"] and run["loss_tokens"] > 0
        assert run["loss_tokens_per_s"] > 0 and run["peak_memory_gb"] is None
        assert run["step_ms_p90"] >= run["step_ms_p50"] > 0
        assert math.isfinite(run["final_loss"]) and run["dtype"] == "float32"
    panels = hf_train.GROUP.panels(result)
    report = group_report(hf_train.GROUP.title, result, panels, hf_train.GROUP.details(result))
    assert "**With sdpa, packed batches train at " in report
    assert "tiny (4.0M parameters, float32), AdamW; 512 tokens per batch" in report
    sdpa_packed = next(line for line in report.splitlines()
                       if line.startswith("| sdpa ") and "| packed " in line)
    assert "| n/a " in sdpa_packed and sdpa_packed.rstrip(" |").endswith("×")


@needs_cuda
@pytest.mark.cuda
@pytest.mark.parametrize("attn", ["flash_attention_2", "sdpa", "flex_attention"])
@pytest.mark.parametrize("layout", hp.LAYOUTS)
def test_each_attention_trains_the_tiny_model_on_cuda(attn: str, layout: str) -> None:
    why = hp.attention_unavailable(attn, "cuda")
    if why is not None:
        pytest.skip(why)
    opts = Options.smoke_test(("gpu",), Path("unused"), data=DATA)
    _, _, _, dataset = hf_train.suite_dataset(opts.data, opts.text_mb, opts.workers)
    run = hp.train(hp.TrainJob(str(dataset), attn=attn, layout=layout, max_tokens=2048,
                               max_seq_len=512, steps=3, warmup=2))
    assert run["status"] == "ok" and run["dtype"] == "bfloat16"
    assert run["peak_memory_gb"] > 0 and math.isfinite(run["final_loss"])
