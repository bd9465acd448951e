"""Lightning drives datapipe loaders as it drives DataLoaders: examples/lightning_train.py, run
as a real script with real worker processes, over the sample tools/make_sample_data.py makes."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest

import datapipe as dp
from examples.recording import read_records
from tests.integration.test_loader_exit import GONE_WITHIN_S, kill_all, kill_group, survivors
from tools.make_sample_data import make_sample_data

pytest.importorskip("lightning")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "lightning_train.py"
RUN_TIMEOUT_S = 180
IMAGES, DOCUMENTS = 256, 400
LIMIT, EPOCHS = 5, 3

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_sample_data(tmp_path_factory.mktemp("sample"), images=IMAGES,
                            documents=DOCUMENTS)


def run_example(shards: Path, workdir: Path, *args: object) -> tuple[list[dict], str]:
    """Run the example to its end; its records, and its output."""
    record = workdir / f"record-{len(list(workdir.glob('record-*')))}.jsonl"
    process = subprocess.Popen([sys.executable, str(EXAMPLE), str(shards), "--record",
                                str(record), *map(str, args)], cwd=workdir, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               start_new_session=True)
    try:
        out, _ = process.communicate(timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the script did not end by itself within {RUN_TIMEOUT_S} s:\n"
                    f"{kill_group(process)}")
    records = read_records(record) if record.exists() else []
    workers = sorted({w for r in records for w in r.get("workers", ())})
    left = survivors(workers, GONE_WITHIN_S)
    kill_all(left)
    assert not left, f"workers {left} outlived the script"
    return records, f"{out}\n(exit code {process.returncode})"


def by_stage(records: list[dict]) -> dict[tuple[str, int], list[list[int]]]:
    """(stage, epoch) -> the batches' ids, in order."""
    out: dict[tuple[str, int], list[list[int]]] = defaultdict(list)
    for r in records:
        out[r["stage"], r["epoch"]].append(r["index"])
    return out


def fresh_batches(shards: Path, epoch: int, max_tokens: int = 4096) -> list[list[int]]:
    """What a new loader with the example's training settings gives in `epoch`."""
    kind = dp.Dataset(shards).manifest.kind
    loader: Any = (dp.TokenLoader(shards, max_tokens=max_tokens, seed=0, num_workers=0)
                   if kind == "text" else
                   dp.Loader(shards, batch_size=32, seed=0, num_workers=0,
                             transform=dp.image.CenterCrop(32)))
    with loader:
        loader.set_epoch(epoch)
        return [b["index"].tolist() for b in loader]


def check_every_validation_sees_every_sample_once(seen: dict, total: int) -> None:
    vals = sorted(k for k in seen if k[0] == "val")
    assert [e for _, e in vals] == list(range(EPOCHS))
    for key in vals:
        counts = Counter(i for batch in seen[key] for i in batch)
        assert sorted(counts) == list(range(total)), f"{key}: not every sample"
        assert set(counts.values()) == {1}, f"{key}: a sample seen twice"


@pytest.mark.parametrize("kind", ["images", "tokens"])
def test_fit_with_limited_epochs_validates_all_trains_new_batches_and_exits(
        sample: Path, tmp_path: Path, kind: str) -> None:
    """Sanity check (2 validation batches, then `break`), limit_train_batches=5 over three
    epochs, validation after each; the script never calls close()."""
    shards = sample / kind
    records, out = run_example(shards, tmp_path, "--epochs", EPOCHS, "--limit-train-batches",
                               LIMIT)
    assert "(exit code 0)" in out, out
    seen = by_stage(records)
    assert len(seen["sanity", 0]) == 2
    check_every_validation_sees_every_sample_once(seen, IMAGES if kind == "images" else
                                                  DOCUMENTS)
    trained = [seen["train", e] for e in range(EPOCHS)]
    for epoch, batches in enumerate(trained):
        assert batches == fresh_batches(shards, epoch)[:LIMIT], \
            f"epoch {epoch} trained on the first {LIMIT} batches of its own epoch"
    assert len({str(b) for b in trained}) == EPOCHS, "three different sets of batches"


def test_token_epochs_of_varying_length_are_trained_whole(sample: Path, tmp_path: Path) -> None:
    """Each epoch's packing gives its own number of batches; the example has Lightning read
    len() anew each epoch, and every epoch trains on all of its batches."""
    shards, budget = sample / "tokens", 1948
    wanted = [fresh_batches(shards, e, budget) for e in range(EPOCHS)]
    assert max(len(w) for w in wanted[1:]) > len(wanted[0]), \
        "the sample should have a later epoch longer than the first"
    records, out = run_example(shards, tmp_path, "--epochs", EPOCHS, "--max-tokens", budget)
    assert "(exit code 0)" in out, out
    seen = by_stage(records)
    for epoch in range(EPOCHS):
        assert seen["train", epoch] == wanted[epoch], f"epoch {epoch}"


def test_a_preempted_fit_resumes_from_its_checkpoint_exactly(sample: Path,
                                                             tmp_path: Path) -> None:
    shards = sample / "images"
    steps_per_epoch = IMAGES // 32
    first, out = run_example(shards, tmp_path, "--epochs", 2, "--preempt-after",
                             steps_per_epoch + 3, "--checkpoint", "preempted.ckpt")
    assert "(exit code -9)" in out and (tmp_path / "preempted.ckpt").exists(), out
    second, out = run_example(shards, tmp_path, "--epochs", 2, "--resume", "preempted.ckpt")
    assert "(exit code 0)" in out, out
    before, after = by_stage(first), by_stage(second)
    assert before["train", 1] + after["train", 1] == fresh_batches(shards, 1), \
        "the interrupted epoch: its first batches, then exactly the rest"
    assert len(before["train", 1]) == 3 and ("train", 0) not in after
    counts = Counter(i for batch in after["val", 1] for i in batch)
    assert sorted(counts) == list(range(IMAGES)) and set(counts.values()) == {1}
