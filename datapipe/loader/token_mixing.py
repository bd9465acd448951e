"""TokenLoader's side of a mixture: each epoch's documents a window at a time
(sampling/mixture_tokens.py), their combined ids for the workers, a batch's `source` beside its
`index`, and what each source gave so far."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from datapipe.errors import ArgumentError
from datapipe.loader.mixing import MixtureSetup, splice
from datapipe.loader.progress_state import LoaderPosition
from datapipe.sampling.elastic import is_count, parse_lineage
from datapipe.sampling.mixture_tokens import WEIGHT_UNITS, TokenMixture
from datapipe.sampling.mixture_weights import Phase, WeightSchedule
from datapipe.sampling.token_windows import TokenStream

_UNIT_NEEDS = {"tokens": "give max_tokens, or layout='fixed' with seq_len",
               "documents": "give batch_size without max_tokens"}


@dataclasses.dataclass(frozen=True)
class CombinedSources:
    """The source of each combined document id (sources read as one, ConcatDataset)."""

    offsets: np.ndarray  # source s's documents are ids offsets[s] .. offsets[s + 1] - 1

    @property
    def sources(self) -> int:
        return len(self.offsets) - 1

    def __call__(self, ids: np.ndarray) -> np.ndarray:
        return np.searchsorted(self.offsets, ids, side="right") - 1


class TokenMixing:
    """A TokenLoader's mixture of `source_lengths` (per source, per document: the tokens the
    overflow policy keeps); `longest`: each source's longest document."""

    def __init__(self, setup: MixtureSetup, source_lengths: Sequence[np.ndarray],
                 weight_by: str, epoch_size: int | None, seed: int, shuffle: bool,
                 step_unit: int | None, longest: Sequence[int],
                 totals: Sequence[int] | None = None) -> None:
        if weight_by not in WEIGHT_UNITS:
            raise ArgumentError(f"weight_by must be one of {', '.join(WEIGHT_UNITS)}, got "
                                f"{weight_by!r}")
        self.setup = setup
        self.names = setup.sources.names
        totals = tuple(totals) if totals is not None else tuple(
            int(n.sum(dtype=np.int64)) for n in source_lengths)
        sizes = list(totals) if weight_by == "tokens" else [len(n) for n in source_lengths]
        self.steps = setup.schedule(sizes)  # as given: phases by step
        if len(self.steps.phases) > 1 and step_unit is None:
            raise ArgumentError(f"weights: phases by step need a fixed amount of {weight_by} "
                                f"per step to be placed ({_UNIT_NEEDS[weight_by]})")
        self.step_unit = step_unit or 1
        self.longest = tuple(longest)
        self.mixture = TokenMixture(tuple(source_lengths), self._positions(self.step_unit),
                                    weight_by, epoch_size, seed, shuffle, totals)
        counts = [len(n) for n in source_lengths]
        self.offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        self.source_of = CombinedSources(self.offsets)
        self._tokens_before: dict[int, np.ndarray] = {}

    def _positions(self, unit: int) -> WeightSchedule:
        """The phases placed in the weights' unit: a phase at step s begins at s x `unit`
        tokens (or documents) of the run (the budget of all ranks' steps)."""
        return WeightSchedule(tuple(Phase(p.start_step * unit, p.weights)
                                    for p in self.steps.phases))

    def _use(self, schedule: WeightSchedule) -> None:
        self.mixture = dataclasses.replace(self.mixture, schedule=schedule)
        self._tokens_before.clear()

    def reconcile(self, state: dict[str, Any],
                  epoch_start: Callable[[int], TokenStream]) -> bool:
        """Take what a saved state fixed: its phases' placement (a state saved at another
        world size placed them by its own tokens per step, and they stay there), and with
        reweight=True, its weights up to where it stopped, these from there on.
        `epoch_start(epoch)`: the loader's plan of an epoch, made anew. True: the weights now
        continue the state's, which was saved with other weights."""
        saved = state.get("identity") if isinstance(state, dict) else None
        if not isinstance(saved, dict):
            return False
        unit = saved.get("phase_unit")
        if is_count(unit) and unit >= 1 and unit != self.step_unit:
            self.step_unit = unit
            self._use(self._positions(unit))
        mine = self.mixture.schedule
        theirs = self.setup.weights_to_continue(state, mine)
        if theirs is None:
            return False
        self._use(theirs)
        at = self._stopped_at(state, epoch_start)
        self._use(splice(theirs, mine, at))
        return True

    def _stopped_at(self, state: dict[str, Any],
                    epoch_start: Callable[[int], TokenStream]) -> int:
        """Where in the run a state stopped, in the weights' unit, planned with the weights
        held now (the state's own). Its counters were checked by the caller's reconcile."""
        world = state["identity"]["world_size"]
        position = LoaderPosition(state["epoch"], state["batches_done"], False,
                                  parse_lineage(state.get("segments")))
        return position.epoch * self.mixture.size + self.drawn_in_epoch(
            position, world, epoch_start(position.epoch))

    def documents(self, epoch: int) -> int:
        """Documents (places) in epoch `epoch`."""
        return self.mixture.epoch(epoch).size

    def window(self, epoch: int, lo: int, hi: int) -> np.ndarray:
        """Combined ids of the documents at places lo .. hi - 1 of the epoch, in order."""
        source, local = self.mixture.window(epoch, lo, hi)
        return self.offsets[source] + local

    def max_epoch_tokens(self) -> int:
        """More tokens than an epoch can hold: as if each source took the whole epoch's
        documents at its longest."""
        mix = self.mixture
        return sum((mix.entries_at(s, mix.size) + 1) * longest
                   for s, longest in enumerate(self.longest))

    def identity(self) -> dict[str, Any]:
        identity = self.setup.identity(self.mixture.identity())
        if len(self.steps.phases) > 1:
            identity["phase_unit"] = self.step_unit
        return identity

    def drawn_in_epoch(self, position: LoaderPosition, world_size: int,
                       start: TokenStream) -> int:
        """How far into its epoch `position` is, in the weights' unit, all sources together."""
        documents, tokens = start.drawn_by(position.segments, position.batches_done,
                                           world_size, position.epoch)
        return tokens if self.mixture.by_tokens else documents

    def progress(self, position: LoaderPosition, world_size: int,
                 start: TokenStream) -> dict[str, dict[str, int]]:
        """Documents and tokens each source gave up to `position`, all ranks together: the
        epochs before whole, then this one's batches handed out (`start`: its plan)."""
        documents, tokens = start.drawn_by_source(position.segments, position.batches_done,
                                                  world_size, position.epoch)
        documents = documents + np.asarray(self.mixture.epoch(position.epoch).entries_before)
        tokens = tokens + self._tokens_before_epoch(position.epoch)
        return {name: {"documents": int(d), "tokens": int(t)}
                for name, d, t in zip(self.names, documents, tokens, strict=True)}

    def _tokens_before_epoch(self, epoch: int) -> np.ndarray:
        found = self._tokens_before.get(epoch)
        if found is None:
            if len(self._tokens_before) >= 2:
                self._tokens_before.pop(next(iter(self._tokens_before)))
            found = self._tokens_before[epoch] = self.mixture.tokens_before(epoch)
        return found


def step_unit(weight_by: str, max_tokens: int | None, batch_size: int | None,
              fixed_row_tokens: int | None, world_size: int) -> int | None:
    """Tokens (or documents) all ranks' steps take, at most, each: what places a phase of
    weights given by step. A fixed layout's rows (`fixed_row_tokens`), else the token budget;
    by documents, the batch size without a budget. None: no amount is fixed."""
    if weight_by == "documents":
        fixed = batch_size if max_tokens is None else None
    else:
        fixed = fixed_row_tokens or max_tokens
    return None if fixed is None else fixed * world_size

