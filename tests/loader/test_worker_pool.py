"""How the worker pool deals batches: by load, so a worker that runs slower (one sharing its
core with the training process) gets fewer of them instead of holding the others to its pace.
Real worker processes; batches still come out in order, each exactly once."""

from __future__ import annotations

import multiprocessing as mp
import os
import time
from typing import Any

import numpy as np

from datapipe.loader.batch_loop import BatchProducer
from datapipe.loader.workers import BatchTask

SLOW_S, FAST_S = 0.04, 0.004
BATCHES = 40


class UnevenBuilder:
    """Worker 0 takes ten times as long over each batch as worker 1."""

    def __init__(self) -> None:
        self.seconds = SLOW_S if mp.current_process().name.endswith("-0") else FAST_S

    def build(self, task: BatchTask, out: np.ndarray) -> dict[str, Any]:
        time.sleep(self.seconds)
        out[:8] = task.batch_no
        return {"batch": task.batch_no, "pid": os.getpid()}


class Plan:
    def has(self, b: int) -> bool:
        return b < BATCHES

    def is_last(self, b: int) -> bool:
        return b == BATCHES - 1

    def batch(self, b: int) -> tuple[np.ndarray, np.ndarray]:
        return np.array([b]), np.zeros(1, dtype=bool)

    def extra(self, b: int) -> dict[str, Any] | None:
        return None


def test_a_slower_worker_is_dealt_fewer_batches() -> None:
    producer = BatchProducer(UnevenBuilder, num_workers=2, prefetch=2, slot_nbytes=8,
                             persistent=True)
    try:
        made = [(meta["batch"], meta["pid"], int(slot[0]))
                for meta, slot in producer.batches(Plan(), epoch=0, start=0)]
        pids = producer.worker_pids
    finally:
        producer.close()
    assert [batch for batch, _, _ in made] == list(range(BATCHES))
    assert [byte for _, _, byte in made] == list(range(BATCHES))
    by_slow = sum(pid == pids[0] for _, pid, _ in made)
    # Dealt in turn, each would build 20. By load, the fast one builds about three for each of
    # the slow one's (the window of 4 batches in flight then waits for the slow one's).
    assert by_slow <= BATCHES * 0.4, f"the slow worker built {by_slow} of {BATCHES}"
