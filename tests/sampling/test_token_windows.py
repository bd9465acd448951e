"""Token plans a window of documents at a time: the epoch's batches, ranks' shares, cursors."""

from __future__ import annotations

import multiprocessing
import threading
import time
from collections import Counter

import numpy as np
import pytest

from datapipe.errors import ArgumentError
from datapipe.loader.token_plans import parse_cursor, plan_window_size
from datapipe.sampling.index_shuffle import IndexShuffle
from datapipe.sampling.token_windows import TokenStream, TokenWindows, WindowStart
from datapipe.sampling.tokens import Pieces, TokenPlan, plan_packed
from datapipe.text.index import LengthSummary

LENGTHS = np.random.default_rng(3).integers(1, 90, 1000)
BUDGET = 256


def windows(window: int, lengths: np.ndarray = LENGTHS, epoch: int = 0,
            planned: list[int] | None = None) -> TokenWindows:
    shuffle = IndexShuffle(len(lengths), [0, epoch])

    def plan(w: int) -> TokenPlan:
        if planned is not None:
            planned.append(w)
        docs = shuffle(np.arange(w * window, min((w + 1) * window, len(lengths))))
        return plan_packed(Pieces(docs, np.zeros(len(docs), np.int64), lengths[docs]), BUDGET,
                           1, None)

    return TokenWindows(-(-len(lengths) // window), plan)


def batches_of(plan_windows: TokenWindows) -> list[np.ndarray]:
    out, g = [], 0
    while (at := plan_windows.locate(g)) is not None:
        out.append(at.plan.batch(at.local)[0])
        g += 1
    return out


@pytest.mark.parametrize("window", [1, 7, 64, 1000, 5000])
def test_the_windows_batches_are_every_document_once(window: int) -> None:
    batches = batches_of(windows(window))
    assert sorted(np.concatenate(batches).tolist()) == list(range(len(LENGTHS)))
    assert len(batches) == windows(window).total()


@pytest.mark.parametrize("world", [1, 2, 3, 8])
def test_ranks_share_the_global_sequence_round_robin_and_step_together(world: int) -> None:
    stream = TokenStream(windows(50))
    total = stream.windows.total()
    plans = [stream.rank_plan(r, world) for r in range(world)]
    steps = -(-total // world)
    assert all(p.has(steps - 1) and not p.has(steps) and len(p) == steps for p in plans), \
        "every rank runs the same number of steps"
    seen = Counter()
    for p in plans:
        for b in range(len(p)):
            at = p.located(b)
            if not p.padding(b):
                seen.update(at.plan.batch(at.local)[0].tolist())
    assert seen == Counter(range(len(LENGTHS))), "real batches: the epoch once"
    padding = sum(p.padding(b) for p in plans for b in range(len(p)))
    assert padding == len(plans[0]) * world - total < world
    assert [p.is_last(len(p) - 1) for p in plans] == [True] * world


def test_a_known_window_start_spares_the_walk_to_it() -> None:
    whole = windows(40)
    end = whole.start(whole.num_windows - 1)
    planned: list[int] = []
    resumed = windows(40, planned=planned)
    resumed.learn(end)
    at = resumed.locate(end.batch + 1)
    assert at is not None and planned == [end.window], "one window planned, not the epoch"
    assert at.start == end and resumed.drawn(end.batch) == (end.documents, end.tokens)


def test_drawn_counts_documents_once_and_every_token() -> None:
    w = windows(30)
    assert w.drawn(0) == (0, 0)
    assert w.drawn(w.total()) == (len(LENGTHS), int(LENGTHS.sum()))
    assert w.drawn(10**9) == (len(LENGTHS), int(LENGTHS.sum()))


def test_an_elastic_remainder_continues_the_same_sequence() -> None:
    stream = TokenStream(windows(30))
    rest = stream.after(2, 5).after(3, 2)
    assert rest.drawn == 16
    plan = rest.rank_plan(1, 4)
    assert plan.global_batch(0) == 17 and plan.global_batch(2) == 25


def test_the_windowed_packing_loses_little_to_window_ends() -> None:
    """Each window's last batch is part-filled: with the default window (about 256 batches'
    worth) the epoch holds within 0.5 % as many batches as one plan of the whole epoch."""
    lengths = np.random.default_rng(0).lognormal(5, 1, 200_000).astype(np.int64).clip(1, 4000)
    budget = 16384
    size = plan_window_size(None, budget, LengthSummary.of(lengths))
    docs = IndexShuffle(len(lengths), [1])(np.arange(len(lengths)))
    whole = len(plan_packed(Pieces(docs, np.zeros(len(docs), np.int64), lengths[docs]), budget,
                            1, None))
    windowed = sum(len(plan_packed(Pieces(d, np.zeros(len(d), np.int64), lengths[d]), budget,
                                   1, None))
                   for d in np.array_split(docs, range(size, len(docs), size)))
    assert whole <= windowed <= whole * 1.005


def test_documents_adjacent_on_disk_are_not_adjacent_in_the_epoch() -> None:
    """The order's neighbours are unrelated: the gap between consecutive documents' ids is
    spread as a random order's is (mean n/3), not small."""
    n = 100_000
    order = IndexShuffle(n, [7, 0])(np.arange(n))
    gaps = np.abs(np.diff(order))
    assert abs(gaps.mean() / (n / 3) - 1) < 0.02
    assert np.mean(gaps < 10) < 0.001


def test_a_document_lands_anywhere_over_epochs() -> None:
    """Document 0's place over 4000 epochs is uniform over 10 deciles (chi-square, 9 degrees
    of freedom, p = 0.001 bound 27.9)."""
    n = 1000
    places = [int(np.flatnonzero(IndexShuffle(n, [0, e])(np.arange(n)) == 0)[0])
              for e in range(4000)]
    counts = np.bincount(np.asarray(places) * 10 // n, minlength=10)
    assert ((counts - 400) ** 2 / 400).sum() < 27.9


def test_a_state_cursor_must_be_counts() -> None:
    assert parse_cursor([3, 10, 5, 700]) == WindowStart(3, 10, 5, 700)
    assert parse_cursor([3, 10, 5, 700, 2, 3, 300, 400]) == WindowStart(3, 10, 5, 700,
                                                                      (2, 3, 300, 400))
    assert parse_cursor(None) is None
    for bad in ([1, 2, 3], [1, -2, 3, 4], "x", [1, 2, 3, True], [1, 2, 3, 4, 5]):
        with pytest.raises(ArgumentError, match="cursor must be"):
            parse_cursor(bad)


def test_the_next_window_is_planned_ahead_in_a_thread() -> None:
    threads: dict[int, str] = {}
    planned: list[int] = []
    inner = windows(100)

    def plan(w: int) -> TokenPlan:
        threads[w] = threading.current_thread().name
        planned.append(w)
        return inner._plan_window(w)

    ahead = TokenWindows(inner.num_windows, plan)
    first = ahead.locate(0).plan
    time.sleep(0.2)
    assert list(threads) == [0], "not at a window's first batch: the workers are starting"
    ahead.locate((len(first) + 1) // 2)  # half of window 0 drawn: window 1 planned ahead
    deadline = time.monotonic() + 10
    while 1 not in threads and time.monotonic() < deadline:
        time.sleep(0.01)
    assert threads == {0: threading.current_thread().name, 1: threads[1]}
    assert threads[1].startswith("datapipe-plan"), threads
    assert [b.tolist() for b in batches_of(ahead)] == [b.tolist() for b in batches_of(inner)]
    assert len(first) and sorted(planned) == list(range(ahead.num_windows)), "each planned once"


def test_without_planning_ahead_every_window_is_planned_on_the_calling_thread() -> None:
    """TokenLoader(num_workers=0): the loop builds every batch itself, so a planning thread
    would only compete with it for the GIL."""
    threads: dict[int, str] = {}
    inner = windows(100)

    def plan(w: int) -> TokenPlan:
        threads[w] = threading.current_thread().name
        return inner._plan_window(w)

    inline = TokenWindows(inner.num_windows, plan, ahead=False)
    assert [b.tolist() for b in batches_of(inline)] == [b.tolist() for b in batches_of(inner)]
    assert inner.num_windows > 1
    assert set(threads.values()) == {threading.current_thread().name}


def test_a_window_planned_ahead_before_a_fork_is_planned_again_in_the_child() -> None:
    started, release = threading.Event(), threading.Event()
    inner = windows(100)

    def plan(w: int) -> TokenPlan:
        if w == 1:  # the parent's ahead plan: still running when the child is forked
            started.set()
            release.wait(10)
        return inner._plan_window(w)

    ahead = TokenWindows(inner.num_windows, plan)
    ahead.locate(len(ahead.plan(0)) - 1)
    assert started.wait(10)
    child = multiprocessing.get_context("fork").Process(target=_plan_next, args=(ahead,))
    child.start()
    child.join(20)
    release.set()
    assert child.exitcode == 0, "the child planned window 1 itself (no thread to wait for)"


def _plan_next(ahead: TokenWindows) -> None:
    ahead._plan_window = lambda w: windows(100)._plan_window(w)  # the child's own: no wait
    ahead.plan(1)
    ahead.locate(ahead.start(2).batch - 1)  # and planning ahead again works in the child
    ahead.plan(2)
