"""Loaders under a real torch.distributed process group: one spawned process per rank.

Each world size is launched once per module (spawning is the expensive part) and runs every
scenario of that world in turn; the tests below then check what the ranks recorded. In the
ranks, loaders take rank and world size from the process group (gloo, rendezvous through a
FileStore in tmp), and every step is a collective, so ranks that disagree on the number of steps
fail an assertion (or the group's timeout) instead of passing. A rank's exception reaches the
parent test with its traceback; a rank that hangs is killed at a deadline and reported; after a
failure the remaining scenarios run again in a fresh group, so a bug fails only its own tests.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import math
import multiprocessing as mp
import os
import signal
import time
import traceback
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.distributed as dist

import datapipe as dp
from datapipe.errors import ArgumentError
from tests.conftest import convert
from tests.imagegen import jpeg_bytes, noise_image

NUM_IMAGES = 97  # prime: shares never divide evenly over 2 or 3 ranks
NUM_DOCS = 150
BATCH = 8
DROP_LAST_BATCHES = (7, 8)  # world 2 / batch 7: the rank share is whole batches; others drop
TOKENS = {"padded": 255, "packed": 259}  # max_tokens: an odd number of batches in both epochs
EPOCHS = (0, 1)
PG_TIMEOUT = timedelta(seconds=20)  # a collective that waits longer than this fails
LAUNCH_TIMEOUT = 90.0  # the whole launch; ranks still alive after this are killed

# --- the ranks -----------------------------------------------------------------------------


def _step_together(step: int) -> None:
    """A collective per step: every rank must be alive and on the same step."""
    world = dist.get_world_size()
    t = torch.tensor([1, step], dtype=torch.int64)
    dist.all_reduce(t)
    assert t.tolist() == [world, step * world], (
        f"rank {dist.get_rank()} at step {step}: {t.tolist()} (ranks out of step)")


def _finish_together(steps: int) -> None:
    """After the last step: every rank must have finished, after the same number of steps."""
    t = torch.tensor([0, steps], dtype=torch.int64)
    dist.all_reduce(t)
    assert t.tolist() == [0, steps * dist.get_world_size()], (
        f"rank {dist.get_rank()} finished after {steps} steps, others did not: {t.tolist()}")


def _gather_int(value: int) -> list[int]:
    out = [torch.zeros(1, dtype=torch.int64) for _ in range(dist.get_world_size())]
    dist.all_gather(out, torch.tensor([value], dtype=torch.int64))
    return [int(t) for t in out]


def _run_epochs(loader: Any) -> list[dict[str, Any]]:
    """Iterate EPOCHS in lockstep with the other ranks; what this rank saw, per epoch.

    Per batch: `index`, and `pad` per sample (images flag samples, token loaders whole batches).
    """
    epochs = []
    for epoch in EPOCHS:
        loader.set_epoch(epoch)
        length = len(loader)
        batches = []
        for step, batch in enumerate(loader):
            _step_together(step)
            index = batch["index"].tolist()
            pad = batch["is_padding"]
            pad = pad.tolist() if isinstance(pad, torch.Tensor) else [bool(pad)] * len(index)
            batches.append({"index": index, "pad": pad,
                            "tokens": int(batch.get("num_real_tokens", 0)),
                            "source": batch["source"].tolist() if "source" in batch else None})
        _finish_together(len(batches))
        epochs.append({"len": length, "lens": _gather_int(length), "batches": batches})
    return epochs


def _image_run(data: dict[str, str], batch_size: int = BATCH, workers: int = 0,
               drop_last: bool = False) -> dict[str, Any]:
    with dp.Loader(data["images"], batch_size=batch_size, num_workers=workers, seed=5,
                   drop_last=drop_last) as loader:
        assert (loader.rank, loader.world_size) == (dist.get_rank(), dist.get_world_size())
        return {"epochs": _run_epochs(loader)}


def _token_run(data: dict[str, str], layout: str) -> dict[str, Any]:
    with dp.TokenLoader(data["tokens"], max_tokens=TOKENS[layout], layout=layout,
                        seed=5) as loader:
        assert (loader.rank, loader.world_size) == (dist.get_rank(), dist.get_world_size())
        return {"epochs": _run_epochs(loader)}


MIXTURE_EPOCH = 120  # images: 90 of the 97 of source "a", 30 of source "b" (up-sampled)


def _image_mixture_run(data: dict[str, str]) -> dict[str, Any]:
    with dp.Loader({"a": data["images"], "b": data["images-b"]}, weights=[3, 1],
                   epoch_size=MIXTURE_EPOCH, batch_size=BATCH, num_workers=0, seed=5) as loader:
        return {"epochs": _run_epochs(loader), "progress": loader.progress()}


def _token_mixture_run(data: dict[str, str]) -> dict[str, Any]:
    with dp.TokenLoader({"a": data["tokens"], "b": data["tokens-b"]}, weights=[3, 1],
                        max_tokens=TOKENS["packed"], seed=5) as loader:
        return {"epochs": _run_epochs(loader), "progress": loader.progress()}


def _error_of(make: Callable[[], Any]) -> str | None:
    try:
        make().close()
    except ArgumentError as exc:
        return str(exc)
    return None


def _explicit_run(data: dict[str, str]) -> dict[str, Any]:
    """Explicit rank/world_size beside an initialised group: they win, the group is ignored."""
    rank = dist.get_rank()
    images = data["images"]
    out: dict[str, Any] = {}
    with dp.Loader(images, batch_size=BATCH, num_workers=0, seed=5, rank=1 - rank,
                   world_size=2) as swapped:
        swapped.set_epoch(0)
        out["swapped"] = {"rank": swapped.rank, "world_size": swapped.world_size,
                          "batches": [b["index"].tolist() for b in swapped]}
    with dp.Loader(images, batch_size=BATCH, num_workers=0, rank=0, world_size=1) as alone:
        real = [b["index"][~b["is_padding"]].tolist() for b in alone]
        out["alone"] = {"len": len(alone), "real": [i for r in real for i in r]}
    with dp.Loader(images, batch_size=BATCH, num_workers=0, rank=rank + 2,
                   world_size=4) as wider:
        out["wider"] = {"rank": wider.rank, "world_size": wider.world_size, "len": len(wider)}
    with dp.TokenLoader(data["tokens"], max_tokens=TOKENS["packed"], rank=0,
                        world_size=1) as tokens:
        out["tokens_alone"] = {"world_size": tokens.world_size, "len": len(tokens)}
    out["errors"] = {
        "rank only": _error_of(lambda: dp.Loader(images, num_workers=0, rank=rank)),
        "world_size only": _error_of(lambda: dp.Loader(images, num_workers=0, world_size=2)),
        "rank == world_size": _error_of(lambda: dp.Loader(images, num_workers=0, rank=2,
                                                          world_size=2)),
        "token rank only": _error_of(lambda: dp.TokenLoader(data["tokens"], max_tokens=64,
                                                            rank=rank)),
    }
    return out


def _accelerate_run(data: dict[str, str]) -> dict[str, Any]:
    """examples/accelerate_train.py's train() on this rank, as torchrun would start it (the
    environment Accelerate reads); Accelerator adopts the group that is already up."""
    rank, world = dist.get_rank(), dist.get_world_size()
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
                      LOCAL_WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT="29500", OMP_NUM_THREADS="1")
    from examples.accelerate_train import train

    return train(data["images"], epochs=1, batch_size=BATCH, workers=1)


def _fail_on_rank1(data: dict[str, str]) -> dict[str, Any]:
    with dp.Loader(data["images"], batch_size=BATCH, num_workers=0) as loader:
        for step, _ in enumerate(loader):
            if dist.get_rank() == 1 and step == 2:
                raise RuntimeError("boom at step 2")
            _step_together(step)
    return {}


def _hang_on_rank1(data: dict[str, str]) -> dict[str, Any]:
    if dist.get_rank() == 1:
        time.sleep(600)
    dist.barrier()
    return {}


SCENARIOS: dict[str, Callable[[dict[str, str]], dict[str, Any]]] = {
    "image": _image_run,
    "image-workers1": lambda data: _image_run(data, workers=1),
    **{f"image-drop-last-{b}": lambda data, b=b: _image_run(data, batch_size=b, drop_last=True)
       for b in DROP_LAST_BATCHES},
    **{f"tokens-{layout}": lambda data, layout=layout: _token_run(data, layout)
       for layout in TOKENS},
    "image-mixture": _image_mixture_run,
    "tokens-mixture": _token_mixture_run,
    "explicit": _explicit_run,
    "accelerate": _accelerate_run,
    "fail-on-rank1": _fail_on_rank1,  # these two test the harness itself
    "hang-on-rank1": _hang_on_rank1,
}
WORLD_SCENARIOS = {
    2: ("image", "image-workers1", *(f"image-drop-last-{b}" for b in DROP_LAST_BATCHES),
        *(f"tokens-{layout}" for layout in TOKENS), "image-mixture", "tokens-mixture",
        "explicit", "accelerate"),
    3: ("image", *(f"image-drop-last-{b}" for b in DROP_LAST_BATCHES), "image-mixture"),
}


def _write_json(path: Path, value: Any) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(value))
    tmp.replace(path)


def _rank_main(rank: int, world: int, workdir: str, scenarios: tuple[str, ...],
               data: dict[str, str], registry: str) -> None:
    """One rank: join the group, run the scenarios (from module `registry`'s SCENARIOS) in
    order, record results or the failure."""
    known = importlib.import_module(registry).SCENARIOS
    with contextlib.suppress(OSError):
        os.setpgid(0, 0)  # so the parent can kill this rank together with its loader workers
    torch.set_num_threads(1)
    out = Path(workdir)
    state: dict[str, Any] = {"results": {}, "running": "init_process_group"}
    try:
        dist.init_process_group("gloo", init_method=f"file://{out / 'store'}", rank=rank,
                                world_size=world, timeout=PG_TIMEOUT)
        for name in scenarios:
            state["running"] = name
            _write_json(out / f"rank{rank}.json", state)
            state["results"][name] = known[name](data)
        state["running"] = "destroy_process_group"
        _write_json(out / f"rank{rank}.json", state)
        dist.barrier()
        dist.destroy_process_group()
        state["running"] = None
        _write_json(out / f"rank{rank}.json", state)
    except BaseException:
        _write_json(out / f"rank{rank}.error.json",
                    {"scenario": state["running"], "traceback": traceback.format_exc()})
        raise SystemExit(1) from None


# --- the parent ----------------------------------------------------------------------------


@dataclass
class Attempt:
    """One spawn of all ranks: what each recorded, and what went wrong."""

    scenarios: tuple[str, ...]
    results: list[dict[str, Any]]
    running: list[str | None]  # what each rank was doing when it stopped (None: finished)
    errors: dict[int, dict[str, str]]
    problems: list[str]

    def report(self) -> list[str]:
        lines = [f"ranks ran {list(self.scenarios)}", *self.problems]
        for rank, error in sorted(self.errors.items()):
            lines.append(f"--- rank {rank} failed in {error['scenario']!r}:\n"
                         f"{error['traceback']}")
        return lines


@dataclass
class WorldRun:
    """Every attempt at one world's scenarios; after a failure the rest run in a new group."""

    world: int
    attempts: list[Attempt] = field(default_factory=list)
    seconds: float = 0.0

    def __getitem__(self, scenario: str) -> list[dict[str, Any]]:
        """The scenario's result on every rank, or a failure carrying the ranks' tracebacks."""
        for attempt in self.attempts:
            if all(scenario in r for r in attempt.results):
                return [r[scenario] for r in attempt.results]
        lines = [f"world {self.world}, scenario {scenario!r}: no result from every rank"]
        tried = [a for a in self.attempts if scenario in a.scenarios]
        for attempt in tried[-1:] or self.attempts:
            lines.extend(attempt.report())
        pytest.fail("\n".join(lines), pytrace=False)


def _kill(process: Any) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)  # the rank and its forked loader workers
    process.kill()
    process.join(10)


def _spawn(world: int, workdir: Path, scenarios: tuple[str, ...], data: dict[str, str],
           deadline: float, registry: str) -> Attempt:
    workdir.mkdir(parents=True)
    context = mp.get_context("spawn")
    processes = [context.Process(target=_rank_main, name=f"datapipe-test-rank{rank}",
                                 args=(rank, world, str(workdir), scenarios, data, registry))
                 for rank in range(world)]
    problems = []
    try:
        for process in processes:
            process.start()
        for process in processes:
            process.join(max(0.0, deadline - time.monotonic()))
    finally:
        for rank, process in enumerate(processes):
            if process.is_alive():
                problems.append(f"rank {rank} still running at the deadline: killed (a hang)")
                _kill(process)
            elif process.exitcode:
                problems.append(f"rank {rank} exited with code {process.exitcode}")
    results, running, errors = [], [], {}
    for rank in range(world):
        done = workdir / f"rank{rank}.json"
        state = json.loads(done.read_text()) if done.exists() else {}
        results.append(state.get("results", {}))
        running.append(state.get("running", "start"))
        failed = workdir / f"rank{rank}.error.json"
        if failed.exists():
            errors[rank] = json.loads(failed.read_text())
    return Attempt(scenarios, results, running, errors, problems)


def launch(world: int, workdir: Path, scenarios: tuple[str, ...], data: dict[str, str],
           timeout: float = LAUNCH_TIMEOUT, registry: str = __name__) -> WorldRun:
    """Run `scenarios` on `world` spawned ranks, within `timeout` seconds in all (their
    functions: the SCENARIOS of module `registry`, which other test modules name).

    A scenario that fails (or hangs) stops its ranks; the scenarios after it run again in a
    fresh process group, so one bug fails only its own tests.
    """
    run = WorldRun(world)
    started = time.monotonic()
    remaining = tuple(scenarios)
    while remaining and time.monotonic() < started + timeout:
        attempt = _spawn(world, workdir / f"attempt{len(run.attempts)}", remaining, data,
                         started + timeout, registry)
        run.attempts.append(attempt)
        culprits = {e["scenario"] for e in attempt.errors.values()} | set(attempt.running)
        if not culprits & set(remaining):
            break  # finished, or failed outside any scenario (setup): trying again won't help
        remaining = tuple(s for s in remaining if s not in culprits
                          and not all(s in r for r in attempt.results))
    run.seconds = time.monotonic() - started
    return run


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return make_data(tmp_path_factory)


def make_data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """97 tiny images (3 classes) and 150 short documents, through the real converters, and
    each again in other shards."""
    root = tmp_path_factory.mktemp("distributed")
    src = root / "src"
    for i in range(NUM_IMAGES):
        folder = src / f"class_{i % 3}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"img_{i:03d}.jpg").write_bytes(jpeg_bytes(noise_image(16, 16, i)))
    convert("images", src, root / "images", "--short-side", "16", "--shard-size", "16KB",
            "--workers", "1")
    rng = np.random.default_rng(0)
    words = ["alpha", "beta", "gamma", "delta", "pi", "omega", "x"]
    lines = [" ".join(rng.choice(words, size=int(n))) for n in rng.integers(1, 20, NUM_DOCS)]
    (root / "docs.txt").write_text("\n".join(lines) + "\n")
    convert("text", root / "docs.txt", root / "tokens", "--tokenizer", "bytes", "--append-eos",
            "--shard-size", "4KB", "--workers", "1")
    # The same samples in other shards: a second dataset of each kind, for mixtures.
    convert("images", src, root / "images-b", "--short-side", "16", "--shard-size", "8KB",
            "--workers", "1")
    convert("text", root / "docs.txt", root / "tokens-b", "--tokenizer", "bytes",
            "--append-eos", "--shard-size", "2KB", "--workers", "1")
    return {name: str(root / name) for name in ("images", "tokens", "images-b", "tokens-b")}


@pytest.fixture(scope="module")
def worlds(data: dict[str, str],
           tmp_path_factory: pytest.TempPathFactory) -> Callable[[int], WorldRun]:
    """world size -> the launch of that world (launched on first use, once per module)."""
    runs: dict[int, WorldRun] = {}

    def get(world: int) -> WorldRun:
        if world not in runs:
            workdir = tmp_path_factory.mktemp(f"world{world}") / "run"
            runs[world] = launch(world, workdir, WORLD_SCENARIOS[world], data)
        return runs[world]

    return get


# --- the checks ----------------------------------------------------------------------------


def _real(epoch: dict[str, Any]) -> list[int]:
    return [i for b in epoch["batches"] for i, p in zip(b["index"], b["pad"], strict=True)
            if not p]


def _padding(epoch: dict[str, Any]) -> list[int]:
    return [i for b in epoch["batches"] for i, p in zip(b["index"], b["pad"], strict=True) if p]


def _check_lockstep(ranks: list[dict[str, Any]], epoch: int) -> list[dict[str, Any]]:
    """Equal len(loader) on every rank (as all_gathered there), and len(loader) steps run."""
    seen = [r["epochs"][epoch] for r in ranks]
    lengths = [s["len"] for s in seen]
    assert len(set(lengths)) == 1, f"len(loader) differs over ranks: {lengths}"
    for s in seen:
        assert s["lens"] == lengths, "all_gather of len(loader) in the ranks"
        assert len(s["batches"]) == s["len"], "a rank ran len(loader) steps"
    return seen


@pytest.mark.parametrize("world, scenario", [(2, "image"), (3, "image"), (2, "image-workers1")])
def test_image_ranks_from_the_group_see_every_sample_once(worlds: Callable[[int], WorldRun],
                                                          world: int, scenario: str) -> None:
    ranks = worlds(world)[scenario]
    share = math.ceil(NUM_IMAGES / world)
    for epoch in EPOCHS:
        seen = _check_lockstep(ranks, epoch)
        assert seen[0]["len"] == math.ceil(share / BATCH)
        for s in seen:
            assert sum(len(b["index"]) for b in s["batches"]) == share, \
                "every rank gets ceil(N / world) samples"
        real = [i for s in seen for i in _real(s)]
        duplicates = sorted(i for i, n in Counter(real).items() if n > 1)
        assert not duplicates, f"non-padding samples seen on two ranks or twice: {duplicates}"
        assert sorted(real) == list(range(NUM_IMAGES)), "every sample once"
        padding = [i for s in seen for i in _padding(s)]
        assert len(padding) == share * world - NUM_IMAGES, "padding only evens out the shares"
    assert _real(ranks[0]["epochs"][0]) != _real(ranks[0]["epochs"][1]), "a new order per epoch"


@pytest.mark.parametrize("world", [2, 3])
@pytest.mark.parametrize("batch", DROP_LAST_BATCHES)
def test_image_drop_last_drops_only_each_ranks_incomplete_batch(
        worlds: Callable[[int], WorldRun], world: int, batch: int) -> None:
    """drop_last acts like DataLoader's on each rank's share of ceil(N / world) samples (the
    share EpochPlan documents): every batch is full, only each share's incomplete last batch
    goes. Shares stride the epoch's (padded) order, so its first world * batch * steps places
    are kept: min(N, that) distinct samples are seen, the rest of the dataset is dropped."""
    ranks = worlds(world)[f"image-drop-last-{batch}"]
    steps = math.ceil(NUM_IMAGES / world) // batch
    kept = min(NUM_IMAGES, world * batch * steps)
    assert NUM_IMAGES - kept == {(2, 7): 0, (2, 8): 1, (3, 7): 13, (3, 8): 1}[world, batch]
    for epoch in EPOCHS:
        seen = _check_lockstep(ranks, epoch)
        assert seen[0]["len"] == steps
        for s in seen:
            assert [len(b["index"]) for b in s["batches"]] == [batch] * steps, "all full"
        real = [i for s in seen for i in _real(s)]
        assert len(real) == len(set(real)), "disjoint over ranks, no duplicates"
        assert set(real) <= set(range(NUM_IMAGES))
        assert NUM_IMAGES - len(real) == NUM_IMAGES - kept, "samples dropped"
        padding = [i for s in seen for i in _padding(s)]
        assert len(padding) == world * batch * steps - kept, "padding kept only in full batches"


@pytest.mark.parametrize("layout", TOKENS)
def test_token_ranks_from_the_group_see_every_document_once(
        worlds: Callable[[int], WorldRun], data: dict[str, str], layout: str) -> None:
    ranks = worlds(2)[f"tokens-{layout}"]
    for epoch in EPOCHS:
        with dp.TokenLoader(data["tokens"], max_tokens=TOKENS[layout], layout=layout,
                            seed=5) as single:
            single.set_epoch(epoch)
            reference = list(single)
        assert len(reference) % 2 == 1, "an odd number of batches: one rank needs padding"
        seen = _check_lockstep(ranks, epoch)
        assert seen[0]["len"] == math.ceil(len(reference) / 2)
        real_batches = [b for s in seen for b in s["batches"] if not any(b["pad"])]
        padding_batches = [b for s in seen for b in s["batches"] if all(b["pad"])]
        assert len(real_batches) + len(padding_batches) == 2 * seen[0]["len"]
        assert len(padding_batches) == 1, "one padding batch evens out the ranks"
        assert Counter(tuple(b["index"]) for b in real_batches) == \
            Counter(tuple(b["index"].tolist()) for b in reference), \
            "the ranks' real batches are the single-process epoch's, each once"
        assert sum(b["tokens"] for b in real_batches) == \
            sum(int(b["num_real_tokens"]) for b in reference)
        docs = Counter(i for b in real_batches for i in b["index"])
        assert sorted(docs) == list(range(NUM_DOCS)), "every document"
        if layout == "padded":  # whole documents: each exactly once
            assert set(docs.values()) == {1}
        # packed splits a document at a batch end: it appears once per piece


def test_explicit_rank_and_world_size_override_the_group(
        worlds: Callable[[int], WorldRun]) -> None:
    run = worlds(2)
    explicit, default = run["explicit"], run["image"]
    for rank, got in enumerate(explicit):
        other = 1 - rank
        assert (got["swapped"]["rank"], got["swapped"]["world_size"]) == (other, 2)
        assert got["swapped"]["batches"] == \
            [b["index"] for b in default[other]["epochs"][0]["batches"]], \
            "rank=1-r gets exactly the batches the other rank got from the group"
        assert got["alone"]["len"] == math.ceil(NUM_IMAGES / BATCH)
        assert sorted(got["alone"]["real"]) == list(range(NUM_IMAGES)), "world_size=1: all"
        assert (got["wider"]["rank"], got["wider"]["world_size"]) == (rank + 2, 4), \
            "a world larger than the group is taken as given"
        assert got["wider"]["len"] == math.ceil(math.ceil(NUM_IMAGES / 4) / BATCH)
        assert got["tokens_alone"]["world_size"] == 1
        errors = got["errors"]
        for case in ("rank only", "world_size only", "token rank only"):
            assert errors[case] and "give both rank and world_size" in errors[case], case
        assert errors["rank == world_size"] and "0 <= rank < world_size" in \
            errors["rank == world_size"]


def test_accelerate_prepare_and_an_epoch_see_every_sample_once(
        worlds: Callable[[int], WorldRun]) -> None:
    """accelerator.prepare hands the loader back; the ranks' shares, trained on through a
    DDP-wrapped model (a gradient all-reduce per step), are the dataset exactly once."""
    ranks = worlds(2)["accelerate"]
    assert [(r["rank"], r["world_size"]) for r in ranks] == [(0, 2), (1, 2)]
    assert ranks[0]["steps"] == ranks[1]["steps"] == math.ceil(math.ceil(NUM_IMAGES / 2) / BATCH)
    seen = [i for r in ranks for i in r["seen"][0]]
    assert sorted(seen) == list(range(NUM_IMAGES)), "every sample, none twice"


def _made_before_the_group(rank: int, world: int, workdir: str, images: str) -> None:
    loader = dp.Loader(images, batch_size=BATCH, num_workers=0)  # rank 0 of 1, for now
    dist.init_process_group("gloo", init_method=f"file://{workdir}/store", rank=rank,
                            world_size=world, timeout=PG_TIMEOUT)
    try:
        next(iter(loader))
        message = "no error"
    except ArgumentError as exc:
        message = str(exc)
    Path(workdir, f"rank{rank}.txt").write_text(message)
    dist.destroy_process_group()


def test_a_loader_made_before_the_process_group_refuses_to_run(tmp_path: Path,
                                                              data: dict[str, str]) -> None:
    """Otherwise every rank would read the whole dataset, each sample once per rank."""
    context = mp.get_context("spawn")
    processes = [context.Process(target=_made_before_the_group,
                                 args=(rank, 2, str(tmp_path), data["images"]))
                 for rank in range(2)]
    for process in processes:
        process.start()
    for process in processes:
        process.join(LAUNCH_TIMEOUT)
        if process.is_alive():
            _kill(process)
    for rank in range(2):
        message = (tmp_path / f"rank{rank}.txt").read_text()
        assert f"was made as rank 0 of 1, but torch.distributed now says rank {rank} of 2" \
            in message


def test_a_failing_rank_reports_its_traceback_not_a_hang(tmp_path: Path,
                                                         data: dict[str, str]) -> None:
    """The harness itself: rank 1 raises mid-epoch, rank 0's next collective fails (gloo sees
    the peer gone, or the group's timeout passes); the parent gets both tracebacks."""
    run = launch(2, tmp_path / "run", ("fail-on-rank1",), data)
    with pytest.raises(pytest.fail.Exception) as failure:
        run["fail-on-rank1"]
    message = str(failure.value)
    assert "rank 1 failed in 'fail-on-rank1'" in message and "boom at step 2" in message
    assert run.seconds < LAUNCH_TIMEOUT


def test_a_hanging_rank_is_killed_and_reported(tmp_path: Path, data: dict[str, str]) -> None:
    """The harness itself: a rank stuck outside any collective is killed at the deadline."""
    run = launch(2, tmp_path / "run", ("hang-on-rank1",), data, timeout=3.0)
    with pytest.raises(pytest.fail.Exception) as failure:
        run["hang-on-rank1"]
    assert "rank 1 still running at the deadline: killed" in str(failure.value)
    assert run.seconds < 20


@pytest.mark.parametrize("world", [2, 3])
def test_an_image_mixtures_ranks_step_together_and_draw_each_sources_share(
        worlds: Callable[[int], WorldRun], world: int) -> None:
    ranks = worlds(world)["image-mixture"]
    for epoch in EPOCHS:
        seen = _check_lockstep(ranks, epoch)
        drawn: Counter = Counter()
        for s in seen:
            for b in s["batches"]:
                counts = Counter(src for src, p in zip(b["source"], b["pad"], strict=True)
                                 if not p)
                if len(b["index"]) == BATCH:  # a whole batch: within one sample of its share
                    assert abs(Counter(b["source"])[0] - BATCH * 0.75) < 1, b["source"]
                drawn.update(counts)
        assert [drawn[0], drawn[1]] == [90, 30], "each source's share of the epoch, over ranks"
    progress = ranks[0]["progress"]
    assert progress == {"a": {"samples": 180}, "b": {"samples": 60}}
    assert all(r["progress"] == progress for r in ranks), "every rank counts all ranks' draws"


def test_a_token_mixtures_ranks_step_together_and_mix_by_tokens(
        worlds: Callable[[int], WorldRun]) -> None:
    ranks = worlds(2)["tokens-mixture"]
    for epoch in EPOCHS:
        seen = _check_lockstep(ranks, epoch)
        sources = Counter(src for s in seen for b in s["batches"] if not b["pad"][0]
                          for src in b["source"] if src >= 0)
        assert sources[0] > 2 * sources[1] > 0, sources
    progress = ranks[0]["progress"]
    assert all(r["progress"] == progress for r in ranks)
    share = progress["a"]["tokens"] / (progress["a"]["tokens"] + progress["b"]["tokens"])
    assert abs(share - 0.75) < 0.02, progress
