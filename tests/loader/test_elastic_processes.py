"""Resuming at another world size under real process groups (gloo on loopback), with
test_distributed_processes' launcher: three launches in sequence, each world loading rank 0's
state from the one before, as from a checkpoint a framework saved.

    world 2: train K steps of epoch 0, save                     -> state "2"
    world 3: from "2", finish epoch 0, then epoch 1            (2 -> 3)
             from "2", train J steps, save                      -> state "2-3"
             train K steps of epoch 0, save                     -> state "3"
    world 2: from "2-3", finish epoch 0                        (2 -> 3 -> 2)
             from "3", finish epoch 0, then epoch 1            (3 -> 2)

Every step is a collective, so ranks that disagree on the number of steps fail.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

import datapipe as dp
from tests.loader.test_distributed_processes import (
    BATCH,
    NUM_DOCS,
    NUM_IMAGES,
    TOKENS,
    WorldRun,
    _finish_together,
    _step_together,
    launch,
    make_data,
)

K, J = 3, 2  # steps before the first save, and in the middle world of 2 -> 3 -> 2
KINDS = ("images", "packed", "padded")

# --- the ranks -----------------------------------------------------------------------------


def _make(kind: str, paths: dict[str, str], workers: int = 1, **rank: int) -> Any:
    if kind == "images":  # a worker: the next epoch is started early, as in training
        return dp.Loader(paths["images"], batch_size=BATCH, num_workers=workers, seed=5, **rank)
    return dp.TokenLoader(paths["tokens"], max_tokens=TOKENS[kind], layout=kind, seed=5,
                          num_workers=0, **rank)


def _record(batch: dict[str, Any], kind: str) -> dict[str, Any]:
    """A batch's entries, padding flags and real tokens per entry (images: 1)."""
    index = batch["index"].tolist()
    pad = batch["is_padding"]
    pad = pad.tolist() if isinstance(pad, torch.Tensor) else [bool(pad)] * len(index)
    if kind == "packed":
        sizes = np.diff(batch["cu_seqlens"].numpy())[:len(index)].tolist()
    elif kind == "padded":
        sizes = batch["attention_mask"].sum(1).tolist()
    else:
        sizes = [1] * len(index)
    return {"index": index, "pad": pad, "sizes": sizes}


def _steps(loader: Any, kind: str, count: int | None) -> dict[str, Any]:
    """`count` steps of the pass (None: to its end) in lockstep with the other ranks."""
    length = len(loader)
    batches = []
    for step, batch in enumerate(loader):
        _step_together(step)
        batches.append(_record(batch, kind))
        if count is not None and step + 1 == count:
            break
    _finish_together(len(batches))
    return {"len": length, "batches": batches}


def _scenario(kind: str, source: str | None, count: int | None) -> Callable[..., Any]:
    """From epoch 0's start (source None) or from rank 0's state of scenario `source` in the
    previous launch; `count` steps, or to the epoch's end and then all of epoch 1."""
    def run(paths: dict[str, str]) -> dict[str, Any]:
        with _make(kind, paths) as loader:
            if source is None:
                loader.set_epoch(0)
            else:
                loader.load_state_dict(json.loads(paths["states"])[source])
            out = {"steps": _steps(loader, kind, count)}
            out["state"] = json.loads(json.dumps(loader.state_dict()))
            if count is None:
                loader.set_epoch(1)  # what Lightning does before the next epoch
                out["next"] = _steps(loader, kind, None)
            return out
    return run


SCENARIOS: dict[str, Callable[[dict[str, str]], dict[str, Any]]] = {}
for _kind in KINDS:
    SCENARIOS.update({
        f"{_kind}-start-{K}": _scenario(_kind, None, K),
        f"{_kind}-from-2-all": _scenario(_kind, f"{_kind}-start-{K}@2", None),
        f"{_kind}-from-2-{J}": _scenario(_kind, f"{_kind}-start-{K}@2", J),
        f"{_kind}-from-2-3-all": _scenario(_kind, f"{_kind}-from-2-{J}@3", None),
        f"{_kind}-from-3-all": _scenario(_kind, f"{_kind}-start-{K}@3", None),
    })
LAUNCHES = (  # (world, scenarios), in order: each loads states the ones before saved
    (2, tuple(f"{k}-start-{K}" for k in KINDS)),
    (3, tuple(s for k in KINDS for s in (f"{k}-from-2-all", f"{k}-from-2-{J}",
                                         f"{k}-start-{K}"))),
    (2, tuple(s for k in KINDS for s in (f"{k}-from-2-3-all", f"{k}-from-3-all"))),
)

# --- the parent ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def paths(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Images and documents through the real converters, as for the other process tests."""
    return make_data(tmp_path_factory)


@pytest.fixture(scope="module")
def runs(paths: dict[str, str],
         tmp_path_factory: pytest.TempPathFactory) -> list[WorldRun]:
    """The three launches; states go from each to the next as rank 0 saved them."""
    states: dict[str, Any] = {}
    done = []
    for n, (world, scenarios) in enumerate(LAUNCHES):
        workdir = tmp_path_factory.mktemp(f"elastic{n}") / "run"
        run = launch(world, workdir, scenarios, {**paths, "states": json.dumps(states)},
                     registry=__name__)
        for name in scenarios:
            for attempt in run.attempts:  # a failed scenario has no state: its tests fail
                if all(name in r for r in attempt.results):
                    states[f"{name}@{world}"] = attempt.results[0][name]["state"]
        done.append(run)
    return done


def _entries(ranks: list[dict[str, Any]], key: str = "steps") -> Counter:
    """Real tokens per document (images: times seen) over the ranks' batches."""
    seen: Counter = Counter()
    for rank in ranks:
        for b in rank[key]["batches"]:
            for i, p, size in zip(b["index"], b["pad"], b["sizes"], strict=True):
                if not p:
                    seen[i] += size
    return seen


def _whole_epoch(kind: str, paths: dict[str, str], epoch: int) -> Counter:
    with _make(kind, paths, workers=0) as single:
        single.set_epoch(epoch)
        return _entries([{"steps": {"batches": [_record(b, kind) for b in single]}}])


def _check_lockstep(ranks: list[dict[str, Any]], key: str = "steps") -> None:
    lengths = {r[key]["len"] for r in ranks}
    assert len(lengths) == 1, f"len(loader) differs over ranks: {lengths}"
    for r in ranks:
        assert len(r[key]["batches"]) == r[key]["len"], "a rank ran len(loader) steps"


def _fresh_epoch_at(kind: str, paths: dict[str, str], world: int, epoch: int) -> list[list[Any]]:
    """Each rank's batches of a fresh epoch at `world`, by explicit rank in this process."""
    out = []
    for rank in range(world):
        with _make(kind, paths, workers=0, rank=rank, world_size=world) as loader:
            loader.set_epoch(epoch)
            out.append([b["index"].tolist() for b in loader])
    return out


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("path", [("2", "3"), ("3", "2"), ("2", "2-3", "2")])
def test_a_resume_at_another_world_size_sees_the_rest_of_the_epoch_once(
        runs: list[WorldRun], paths: dict[str, str],
        kind: str, path: tuple[str, ...]) -> None:
    """Counted, not set-compared: the real entries before and after are the epoch's, once."""
    first, middle, last = runs
    parts = {("2", "3"): [first[f"{kind}-start-{K}"], middle[f"{kind}-from-2-all"]],
             ("3", "2"): [middle[f"{kind}-start-{K}"], last[f"{kind}-from-3-all"]],
             ("2", "2-3", "2"): [first[f"{kind}-start-{K}"], middle[f"{kind}-from-2-{J}"],
                                 last[f"{kind}-from-2-3-all"]]}[path]
    seen: Counter = Counter()
    for ranks in parts:
        seen += _entries(ranks)
    _check_lockstep(parts[-1])
    whole = _whole_epoch(kind, paths, 0)
    assert len(whole) == (NUM_IMAGES if kind == "images" else NUM_DOCS)
    assert seen == whole, "every sample (every token of every document) of epoch 0 once"
    assert parts[-1][0]["state"]["epoch_finished"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("source, launch_at", [("2", 1), ("3", 2)])
def test_after_the_resumed_epoch_comes_an_ordinary_one(
        runs: list[WorldRun], paths: dict[str, str],
        kind: str, source: str, launch_at: int) -> None:
    run = runs[launch_at]
    ranks = run[f"{kind}-from-{source}-all"]
    _check_lockstep(ranks, "next")
    got = [[b["index"] for b in r["next"]["batches"]] for r in ranks]
    assert got == _fresh_epoch_at(kind, paths, run.world, 1)
