"""Phases of weights over positions in a unit (tokens or documents) instead of steps.

A token mixture's epoch has a size E in the weights' unit, and epoch e covers positions
[e * E, (e + 1) * E) of the run's stream of epochs; a phase's `start_step` is such a position
(a loader gives start_step x its tokens per step). Each phase in force over a part of an epoch
(a *span*) gives that part's per-source amounts, so the epoch's quotas follow the phases
exactly, and a switch mid-epoch lands where it was named.

Where a source's stream stands at an epoch is the sum of its quotas over the epochs before,
summed arithmetically, as `Mixture.drawn_before` does: whole epochs inside one phase multiply,
and only the epochs a phase begins within are split span by span, so a phase that begins after
10,000 epochs costs what one after two does.
"""

from __future__ import annotations

from dataclasses import dataclass

from datapipe.sampling.mixture_weights import WeightSchedule, apportion


@dataclass(frozen=True)
class Span:
    """Positions begin .. end - 1 of an epoch (from its start) under one phase, and each
    source's amount of them (summing to end - begin)."""

    begin: int
    end: int
    amounts: tuple[int, ...]


def epoch_spans(schedule: WeightSchedule, epoch: int, size: int) -> list[Span]:
    """The spans of epoch `epoch` of `size` positions, in order."""
    return [Span(lo, hi, tuple(apportion(hi - lo, weights.shares)))
            for lo, hi, weights in schedule.spans(epoch * size, size)]


def epoch_quota(schedule: WeightSchedule, epoch: int, size: int) -> list[int]:
    """Each source's amount of epoch `epoch`: the sum of its amounts over the epoch's spans."""
    spans = epoch_spans(schedule, epoch, size)
    return [sum(column) for column in zip(*(span.amounts for span in spans), strict=True)]


def drawn_before(schedule: WeightSchedule, epoch: int, size: int) -> list[int]:
    """Each source's amounts summed over the epochs before `epoch`: where its stream stands."""
    starts = [phase.start_step for phase in schedule.phases]
    # Epochs a phase begins strictly within: the only ones not under a single phase.
    crossed = {s // size for s in starts[1:] if s % size and s // size < epoch}
    total = [0] * len(schedule.phases[0].weights.values)
    for e in crossed:
        total = _plus(total, epoch_quota(schedule, e, size))
    for i, phase in enumerate(schedule.phases):
        first = -(-phase.start_step // size)  # the first epoch that begins in the phase
        stop = epoch if i + 1 == len(starts) else min(epoch, starts[i + 1] // size)
        if stop > first:
            whole = apportion(size, phase.weights.shares)
            total = _plus(total, [(stop - first) * amount for amount in whole])
    return total


def _plus(a: list[int], b: list[int]) -> list[int]:
    return [x + y for x, y in zip(a, b, strict=True)]
