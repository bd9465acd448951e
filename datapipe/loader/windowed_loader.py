"""What the loaders planned a window at a time (TokenLoader, PatchLoader, VLMLoader) share: the
epoch plans kept while they are asked for, the state's `cursor` (where the window under way
begins, so that a restore plans that window alone), the loop that turns the workers' buffers
into batches, and a mixture's part in a restore (its weights, where it stopped)."""

from __future__ import annotations

import functools
import time
from collections.abc import Iterator
from typing import Any

import torch

from datapipe.errors import ArgumentError
from datapipe.loader.arguments import check_counter
from datapipe.loader.base import LoaderBase
from datapipe.loader.token_plans import WindowedRankPlan, parse_cursor
from datapipe.sampling.token_windows import TokenStream

_KEPT_EPOCHS = 2  # the epoch under way and the next (the workers start on it early)


class WindowedLoader(LoaderBase):
    """Subclasses set `self._planner` (a TokenEpochPlanner), `self.plan_window`,
    `self.mixing` (a TokenMixing, or None for one dataset) and `self._producer`, and
    implement `_host_batch` (a worker's buffer as a batch) and `_epoch_amount_bound` (more
    tokens, or patches, than one dataset's epoch holds)."""

    mixing: Any = None

    def __init__(self, path: Any = None, fields: Any = None) -> None:
        super().__init__(path, fields)
        self._starts: dict[int, TokenStream] = {}

    # --- plans ---------------------------------------------------------------------------

    def _epoch_start(self, epoch: int) -> TokenStream:
        """The epoch's batches, planned a window at a time as they are asked for, kept for the
        epoch under way and the next (progress() asks again)."""
        start = self._starts.get(epoch)
        if start is None:
            while len(self._starts) >= _KEPT_EPOCHS:
                del self._starts[next(iter(self._starts))]
            start = self._starts[epoch] = self._planner.epoch(epoch)
        return start

    def _rank_plan(self, rest: TokenStream, epoch: int) -> WindowedRankPlan:
        # No lengths: a sample is never cut, so no piece carries a target on.
        return WindowedRankPlan(rest.rank_plan(self.rank, self.world_size))

    # --- iteration -----------------------------------------------------------------------

    def _host_batches(self, plan: WindowedRankPlan, epoch: int,
                      start: int) -> Iterator[tuple[int, dict[str, Any]]]:
        """Batches `start` .. of the plan as the workers fill them, on the host; the time
        each takes here is the profiler's `collate` stage."""
        upcoming = functools.partial(self._upcoming, epoch + 1)
        for b, (meta, slot) in enumerate(self._producer.batches(plan, epoch, start, upcoming),
                                         start):
            t0 = time.perf_counter()
            batch = self._host_batch(b, meta, slot, plan)
            self._record(b, meta, {"collate": time.perf_counter() - t0})
            yield b, batch

    def _host_batch(self, b: int, meta: dict[str, Any], slot: torch.Tensor,
                    plan: WindowedRankPlan) -> dict[str, Any]:
        """Batch b from the worker's metadata and its buffer (`slot`, the buffer's bytes:
        tensors handed out should view it, `slots.slot_view`, to be copied in place)."""
        raise NotImplementedError

    # --- state ---------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        plan = self._plan(self._position.epoch)
        state["cursor"] = plan.rank_windows.cursor(self._position.batches_done).to_json()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        cursor = parse_cursor(state.get("cursor") if isinstance(state, dict) else None)
        epoch = None
        if cursor is not None:
            epoch = check_counter("load_state_dict: the state's epoch", state.get("epoch"))
            most = (self.mixing.max_epoch_tokens() if self.mixing is not None
                    else self._epoch_amount_bound())
            # Where the state's window begins, so that restoring plans that window alone.
            self._epoch_start(epoch).windows.learn_checked(cursor, self.plan_window, most,
                                                           f"epoch {epoch}")
        try:
            super().load_state_dict(state)
        except ArgumentError:
            if epoch is not None:  # a refused state's cursor must not place later batches
                self._starts.pop(epoch, None)
                self._plans.clear()
            raise

    def _epoch_amount_bound(self) -> int:
        raise NotImplementedError

    # --- mixtures ------------------------------------------------------------------------

    def _source_offsets(self) -> Any:
        return None if self.mixing is None else self.mixing.offsets

    def _reweight(self, state: dict[str, Any]) -> bool:
        if self.mixing is None:
            return False
        before = self.mixing.mixture
        changed = self.mixing.reconcile(state, self._fresh_epoch_start)
        if self.mixing.mixture is not before:  # planned with the weights before, or the state's
            self._starts.clear()
            self._plans.clear()
        return changed

    def _fresh_epoch_start(self, epoch: int) -> TokenStream:
        """The epoch planned anew (the mixture's weights changed)."""
        self._starts.clear()
        return self._epoch_start(epoch)
