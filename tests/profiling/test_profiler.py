"""Each regime is planted for real and the verdict must name it."""

from __future__ import annotations

import html
import json
import sys
import time
from pathlib import Path

import pytest
import torch

import datapipe as dp
from datapipe.loader import image_batches
from tests.conftest import convert, run_cli_process
from tests.imagegen import make_image_folder

CROP = dp.image.RandomResizedCrop(32)


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("profile")
    src = make_image_folder(root / "src", classes=2, per_class=24, size=(64, 48))
    out = root / "out"
    convert("images", src, out, "--short-side", "48")
    return out


def _busy(seconds: float) -> None:
    """Real work, not sleep: a step that occupies the CPU like a training step."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def _run(iterable, step_seconds, **kwargs) -> dict:
    with dp.profile(**kwargs) as prof:
        for batch in prof.wrap(iterable):
            step_seconds(batch)
            prof.step()
    return prof.results()


def test_slow_decode_stage_is_input_bound_and_named(shards: Path, monkeypatch) -> None:
    real = image_batches.decode_into

    def slow_decode(*args, **kwargs):
        time.sleep(0.004)
        return real(*args, **kwargs)

    monkeypatch.setattr(image_batches, "decode_into", slow_decode)
    with dp.Loader(shards, batch_size=8, num_workers=1, transform=CROP) as loader:
        result = _run(loader, lambda b: _busy(0.002))
    verdict = result["verdict"]
    assert verdict["regime"] == "input-bound" and verdict["severity"] == "highly"
    assert verdict["stage"] == "decode" and "decoding images" in verdict["text"]
    assert result["exposed_input_fraction"] > 0.5
    assert result["queue"]["empty_fraction"] > 0.5
    # The one thing to try first: the cores the one worker left idle, else the GPU decoder.
    cores = result["cores"]
    assert result["num_workers"] == 1 and cores >= 1
    assert verdict["next"].startswith(f"`num_workers={cores}` (the loader ran 1 worker, " if
                                      cores > 1 else '`decode="dali", device="cuda"`')


def test_slow_step_with_a_fast_loader_is_compute_bound(shards: Path) -> None:
    with dp.Loader(shards, batch_size=4, num_workers=2, transform=CROP) as loader:
        # A 15% threshold leaves room for a busy machine; a starving loader waits > 50%.
        result = _run(loader, lambda b: _busy(0.03), moderately_input_bound=0.15)
    assert result["verdict"]["regime"] == "compute-bound", result["verdict"]["text"]
    assert result["exposed_input_fraction"] < 0.15
    assert result["first_step"] is not None and result["steps"] == 12
    # No scaling test ran: the verdict says how to run it (once as the next thing to do).
    how = "`datapipe profile --scaling-test -- python train.py`, or " \
          "`dp.profile(scaling_test=True)` in the script"
    assert result["verdict"]["next"] == how and how in result["verdict"]["text"]


def test_step_that_ignores_batch_size_is_overhead_bound(shards: Path) -> None:
    with dp.Loader(shards, batch_size=4, num_workers=2, transform=CROP) as loader:
        # Thresholds raised: this test is about the scaling probe, not about a busy machine.
        result = _run(loader, lambda b: _busy(0.02), scaling_test=True,
                      moderately_input_bound=0.3, highly_input_bound=0.5)
    assert result["verdict"]["regime"] == "overhead-bound", result["verdict"]["text"]
    assert result["probes"]["growth_at_2x_batch"] < 1.3


def test_step_proportional_to_batch_is_compute_bound_under_scaling(shards: Path) -> None:
    with dp.Loader(shards, batch_size=4, num_workers=2, transform=CROP) as loader:
        result = _run(loader, lambda b: _busy(0.005 * b["image"].shape[0]), scaling_test=True,
                      moderately_input_bound=0.3, highly_input_bound=0.5)
    assert result["verdict"]["regime"] == "compute-bound", result["verdict"]["text"]
    assert result["probes"]["growth_at_2x_batch"] > 1.7
    assert result["probes"]["speedup_with_perfect_input"] == pytest.approx(1.0, abs=0.3)


class SlowDataset(torch.utils.data.Dataset):
    def __init__(self, delay: float) -> None:
        self.delay = delay

    def __len__(self) -> int:
        return 40

    def __getitem__(self, i: int) -> torch.Tensor:
        time.sleep(self.delay)
        return torch.full((3,), float(i))


def test_plain_torch_dataloader_input_bound_and_compute_bound() -> None:
    slow = torch.utils.data.DataLoader(SlowDataset(0.003), batch_size=4)
    result = _run(slow, lambda b: _busy(0.001))
    assert result["verdict"]["regime"] == "input-bound"
    assert any("stage times need a datapipe loader" in n for n in result["notes"])
    fast = torch.utils.data.DataLoader(SlowDataset(0.0), batch_size=4)
    # 30 ms steps, as in the Loader case: a loaded machine can stall a fetch for a millisecond.
    fast_result = _run(fast, lambda b: _busy(0.03), moderately_input_bound=0.15)
    assert fast_result["verdict"]["regime"] == "compute-bound"


def test_outputs_json_trace_and_page(shards: Path, tmp_path: Path) -> None:
    with dp.Loader(shards, batch_size=8, num_workers=1, transform=CROP) as loader:
        result = _run(loader, lambda b: _busy(0.002), report=tmp_path / "r.json",
                      trace=tmp_path / "t.json", html=tmp_path / "p.html", oracle=True)
    saved = json.loads((tmp_path / "r.json").read_text())
    assert saved["verdict"]["text"] == result["verdict"]["text"]
    events = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    names = {e["name"] for e in events}
    assert any(n.startswith("build batch") for n in names) and "ready batches" in names
    page = (tmp_path / "p.html").read_text()
    head, _, rest = result["verdict"]["text"].partition(": ")
    assert "<svg" in page and head.capitalize() in page and html.escape(rest) in page
    assert "oracle_step_seconds" in saved["probes"]


def test_report_leads_with_the_verdict(shards: Path) -> None:
    with dp.Loader(shards, batch_size=8, num_workers=1, transform=CROP) as loader, \
            dp.profile() as prof:
        for _ in prof.wrap(loader):
            prof.step()
    text = prof.report()
    assert text.startswith("datapipe profile: ") and "exposed input fraction" in text
    assert "absent: no CUDA device" in text or torch.cuda.is_available()


def test_cli_profiles_an_unchanged_script(shards: Path, tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(
        "import sys, time\nimport datapipe as dp\n"
        f"loader = dp.Loader({str(shards)!r}, batch_size=8, num_workers=1,\n"
        "                   transform=dp.image.RandomResizedCrop(32))\n"
        "for epoch in range(2):\n"
        "    loader.set_epoch(epoch)\n"
        "    for batch in loader:\n"
        "        end = time.perf_counter() + 0.02\n"
        "        while time.perf_counter() < end: pass\n")
    prefix = tmp_path / "prof"
    result = run_cli_process("profile", "--out", prefix, "--scaling-test", "--", sys.executable,
                             script)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("datapipe profile: ")
    saved = json.loads(Path(f"{prefix}.json").read_text())
    assert saved["steps"] == 12 and saved["probes"]["growth_at_2x_batch"] < 1.3
    assert Path(f"{prefix}.trace.json").is_file() and Path(f"{prefix}.html").is_file()


def test_cli_out_directory_is_made_and_no_stale_report_is_shown(tmp_path: Path) -> None:
    prefix = tmp_path / "new" / "dir" / "prof"
    prefix.parent.mkdir(parents=True)
    Path(f"{prefix}.txt").write_text("datapipe profile: an earlier run's verdict\n")
    result = run_cli_process("profile", "--out", prefix, "--", sys.executable, "-c", "pass")
    assert result.returncode == 0
    assert "earlier run" not in result.stdout and "iterated no datapipe loader" in result.stderr
    made = tmp_path / "made" / "here"
    run_cli_process("profile", "--out", made / "prof", "--", sys.executable, "-c", "pass")
    assert made.is_dir()
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    result = run_cli_process("profile", "--out", blocked / "prof", "--", sys.executable, "-c",
                             "pass")
    assert result.returncode == 2 and "cannot create" in result.stderr
    assert "Traceback" not in result.stderr


def test_token_loader_is_profiled_too(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("".join(f"document {i} " * (i % 7 + 1) + "\n"
                                            for i in range(200)))
    convert("text", tmp_path / "a.txt", tmp_path / "t", "--tokenizer", "bytes")
    with dp.TokenLoader(tmp_path / "t", max_tokens=256, num_workers=1) as loader:
        result = _run(loader, lambda b: _busy(0.002))
    assert "read" in result["stages"]["worker_seconds"]


def test_the_profiler_keeps_no_batch_alive() -> None:
    # Batches may hold a shared-memory slot or GPU memory: only the probes need one, once.
    import gc
    import weakref

    def batches():
        for _ in range(8):
            yield torch.zeros(4)

    for probes in ({}, {"oracle": True}):
        with dp.profile(**probes) as prof:
            for batch in prof.wrap(batches()):
                last = weakref.ref(batch)
                prof.step()
        del batch
        gc.collect()
        assert last() is None, probes
        assert prof.results()["steps"] == 8


def test_cli_profiles_each_rank_of_torchrun_to_its_own_files(shards: Path,
                                                             tmp_path: Path) -> None:
    """Every rank inherits the prefix; each writes its own report instead of all overwriting
    one file, and an earlier run's files of a rank this run lacks are removed."""
    script = tmp_path / "train.py"
    script.write_text(
        "import torch.distributed as dist\nimport datapipe as dp\n"
        "dist.init_process_group('gloo')\n"
        f"loader = dp.Loader({str(shards)!r}, batch_size=4, num_workers=1,\n"
        "                   transform=dp.image.RandomResizedCrop(32))\n"
        "for batch in loader:\n"
        "    dist.barrier()\n"
        "dist.destroy_process_group()\n")
    prefix = tmp_path / "prof"
    Path(f"{prefix}.rank2.txt").write_text("datapipe profile: an earlier run's rank 2\n")
    result = run_cli_process("profile", "--out", prefix, "--", sys.executable, "-m",
                             "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                             script)
    assert result.returncode == 0, result.stderr
    assert "the other rank's report: " in result.stdout and ".rank1.*" in result.stdout
    for rank_prefix in (f"{prefix}", f"{prefix}.rank1"):
        saved = json.loads(Path(f"{rank_prefix}.json").read_text())
        assert saved["steps"] == 6, rank_prefix  # 48 images over 2 ranks in batches of 4
        assert Path(f"{rank_prefix}.txt").read_text().startswith("datapipe profile: ")
    assert not Path(f"{prefix}.rank2.txt").exists()
