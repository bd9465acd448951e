"""An epoch of token batches planned a window of documents at a time.

The epoch's documents are in a keyed shuffled order (sampling/index_shuffle.py), computed per
position. Window w holds the documents at positions w*W .. (w+1)*W - 1 of that order; the
layout's planner turns them into batches (sampling/tokens.py), and the windows' batches back
to back are the epoch's global batch sequence, the one ranks draw round robin. Nothing here is
the size of the corpus: a window costs what its W documents cost, wherever it lies, so the
first batch of any epoch, and of a resumed one, is one window's planning away.

What a window-at-a-time plan does not know up front is where each window's batches begin:
that is the sum of the batch counts before it. The loader finds them as it goes (every rank
plans every window in turn) and a saved state carries the one it needs (`WindowStart`), so a
resume plans one window. Only `len()` walks the whole epoch.
"""

from __future__ import annotations

import bisect
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from datapipe.errors import ArgumentError
from datapipe.sampling.elastic import Segment, follow
from datapipe.sampling.tokens import TokenPlan

# Windows planned and kept: the one being drawn, the next, and a padding repeat's.
_KEPT_WINDOWS = 3
_PLANNING_THREADS: dict[int, ThreadPoolExecutor] = {}


@dataclass(frozen=True)
class WindowStart:
    """Where window `window` begins: its first batch in the epoch's global sequence, and the
    documents (counted with their first piece) and tokens of every batch before it; for a
    mixture, also per source (`by_source`: the documents of each, then the tokens of each)."""

    window: int
    batch: int
    documents: int
    tokens: int
    by_source: tuple[int, ...] = ()

    def to_json(self) -> list[int]:
        return [self.window, self.batch, self.documents, self.tokens, *self.by_source]


@dataclass(frozen=True)
class Located:
    """A global batch: its window's plan and its number there."""

    start: WindowStart
    plan: TokenPlan
    local: int


class TokenWindows:
    """One epoch's global batch sequence, `plan_window(w)` giving window w's batches.
    `source_of` (a mixture's): the source of each document id, for counts per source."""

    def __init__(self, num_windows: int, plan_window: Callable[[int], TokenPlan],
                 source_of: SourceOf | None = None, ahead: bool = True) -> None:
        self.num_windows = num_windows
        self.ahead = ahead  # plan the next window in a thread (see _plan_ahead)
        self._plan_window = plan_window
        self.source_of = source_of
        self._plans: OrderedDict[int, TokenPlan] = OrderedDict()
        width = 0 if source_of is None else 2 * source_of.sources
        self._starts: dict[int, WindowStart] = {0: WindowStart(0, 0, 0, 0, (0,) * width)}
        # Windows whose start is known, ascending, and their first batches (ascending too).
        self._known, self._known_batches = [0], [0]
        self._last: Located | None = None  # most lookups fall in the window of the one before
        self._lock = threading.Lock()
        self._ahead: dict[int, tuple[int, Future[TokenPlan]]] = {}  # window: (pid, its plan)

    def plan(self, w: int) -> TokenPlan:
        """Window w's batches (planned here, or taken from the thread that planned it
        ahead)."""
        with self._lock:
            plan = self._plans.get(w)
            if plan is not None:
                self._plans.move_to_end(w)
            ahead = self._ahead.pop(w, None) if plan is None else None
        if plan is None:
            # A plan begun before a fork has no thread in the child: planned here instead.
            mine = ahead is not None and ahead[0] == os.getpid()
            plan = ahead[1].result() if mine else self._plan_window(w)
            with self._lock:
                self._plans[w] = plan
                while len(self._plans) > _KEPT_WINDOWS:
                    self._plans.popitem(last=False)
        return plan

    def _plan_ahead(self, w: int) -> None:
        """Window w planned in a thread, so the training thread rarely waits for one (numpy
        releases the GIL for most of it). Asked once half of the window before is drawn: not
        at an epoch's or a resume's first batch, where it would compete with the workers'
        start."""
        with self._lock:
            if w >= self.num_windows or w in self._plans or w in self._ahead:
                return
            self._ahead.clear()  # one ahead at most: an older one was not asked for
            self._ahead[w] = (os.getpid(), _planning_thread().submit(self._plan_window, w))

    def learn(self, start: WindowStart) -> None:
        """A window's start, known from elsewhere (a saved state): no walk to it."""
        if 0 <= start.window <= self.num_windows and start.window not in self._starts:
            self._starts[start.window] = start
            i = bisect.bisect(self._known, start.window)
            self._known.insert(i, start.window)
            self._known_batches.insert(i, start.batch)

    def learn_checked(self, start: WindowStart, window_documents: int, tokens: int,
                      where: str) -> None:
        """`learn`, once `start` is shown possible: a window of this epoch, no more documents
        before it than its windows hold, no more tokens than the epoch has, and a mixture's
        counts per source adding up to them."""
        width = len(self._starts[0].by_source)
        split = start.by_source
        if start.window > self.num_windows or start.documents > start.window * window_documents \
                or start.tokens > tokens or len(split) != width or (width and (
                    sum(split[:width // 2]) != start.documents
                    or sum(split[width // 2:]) != start.tokens)):
            raise ArgumentError(f"load_state_dict: the state's cursor {start.to_json()} is "
                                f"impossible for {where} ({self.num_windows} windows of "
                                f"{window_documents} documents)")
        self.learn(start)

    def start(self, w: int) -> WindowStart:
        """Where window w begins (w == num_windows: the epoch's end), walking from the nearest
        window before it whose start is known."""
        k = self._known[bisect.bisect_right(self._known, w) - 1]
        start = self._starts[k]
        while start.window < w:
            start = self._next(start)
        return start

    def _next(self, start: WindowStart) -> WindowStart:
        plan = self.plan(start.window)
        documents, tokens = prefix_counts(plan, len(plan))
        split = self._by_source(plan, len(plan))
        following = WindowStart(start.window + 1, start.batch + len(plan),
                                start.documents + documents, start.tokens + tokens,
                                tuple(a + int(b) for a, b in zip(start.by_source, split,
                                                                 strict=True)))
        self.learn(following)
        return following

    def locate(self, g: int) -> Located | None:
        """Global batch g, or None past the epoch's last batch."""
        last = self._last
        if last is not None and 0 <= g - last.start.batch < len(last.plan):
            at = Located(last.start, last.plan, g - last.start.batch)
        else:
            at = self._walk_to(g)
        if self.ahead and at is not None and 2 * at.local >= len(at.plan):
            self._plan_ahead(at.start.window + 1)
        return at

    def _walk_to(self, g: int) -> Located | None:
        i = bisect.bisect_right(self._known_batches, g) - 1
        start = self._starts[self._known[max(i, 0)]]
        while start.window < self.num_windows:
            plan = self.plan(start.window)
            if g < start.batch + len(plan):
                self._last = Located(start, plan, g - start.batch)
                return self._last
            start = self._next(start)
        return None

    def total(self) -> int:
        """Batches in the epoch: a walk over every window not walked yet."""
        return self.start(self.num_windows).batch

    def drawn(self, g: int) -> tuple[int, int]:
        """(documents, tokens) in the first g global batches."""
        at = self.locate(g)
        if at is None:
            end = self.start(self.num_windows)
            return end.documents, end.tokens
        documents, tokens = prefix_counts(at.plan, at.local)
        return at.start.documents + documents, at.start.tokens + tokens

    def drawn_by_source(self, g: int) -> tuple[np.ndarray, np.ndarray]:
        """A mixture's (documents, tokens) of each source in the first g global batches."""
        at = self.locate(g)
        if at is None:
            split = np.asarray(self.start(self.num_windows).by_source, dtype=np.int64)
        else:
            split = np.asarray(at.start.by_source, dtype=np.int64) + \
                self._by_source(at.plan, at.local)
        return split[:len(split) // 2], split[len(split) // 2:]

    def _by_source(self, plan: TokenPlan, batches: int) -> np.ndarray:
        """prefix_counts per source (documents of each, then tokens of each); empty for one
        dataset."""
        if self.source_of is None:
            return np.zeros(0, dtype=np.int64)
        sources = self.source_of.sources
        segments = int(plan.row_offsets[plan.batch_offsets[batches]])
        source = self.source_of(plan.doc[:segments])
        first = plan.start[:segments] == 0
        documents = np.bincount(source[first], minlength=sources)
        tokens = np.bincount(source, weights=plan.end[:segments] - plan.start[:segments],
                             minlength=sources)
        return np.concatenate([documents, tokens]).astype(np.int64)


class SourceOf(Protocol):
    """The source of each of a mixture's document ids, and how many sources there are."""

    sources: int

    def __call__(self, ids: np.ndarray) -> np.ndarray: ...


def _planning_thread() -> ThreadPoolExecutor:
    """This process's thread for windows planned ahead (a forked child makes its own: the
    parent's thread is not there)."""
    pool = _PLANNING_THREADS.get(os.getpid())
    if pool is None:
        pool = _PLANNING_THREADS[os.getpid()] = ThreadPoolExecutor(
            1, thread_name_prefix="datapipe-plan")
    return pool


def prefix_counts(plan: TokenPlan, batches: int) -> tuple[int, int]:
    """(documents, tokens) in a plan's first `batches` batches; a document counts once, with
    its first piece."""
    segments = int(plan.row_offsets[plan.batch_offsets[batches]])
    return (int(np.count_nonzero(plan.start[:segments] == 0)),
            int((plan.end[:segments] - plan.start[:segments]).sum()))


@dataclass(frozen=True)
class TokenStream:
    """What is left of an epoch of windowed token batches: its global sequence from batch
    `drawn` on (what earlier segments, at other world sizes, drew is a prefix of it)."""

    windows: TokenWindows
    drawn: int = 0

    def batches_per_rank(self, world_size: int) -> int:
        return -(-max(0, self.windows.total() - self.drawn) // world_size)

    def has_batches(self, world_size: int, count: int) -> bool:
        return count == 0 or self.windows.locate(self.drawn + (count - 1) * world_size) \
            is not None

    def after(self, world_size: int, batches_done: int) -> TokenStream:
        return TokenStream(self.windows, self.drawn + batches_done * world_size)

    def drawn_by(self, lineage: Sequence[Segment], batches_done: int, world_size: int,
                 epoch: int) -> tuple[int, int]:
        """(documents, tokens) the ranks drew: in the segments of `lineage`, then in each
        rank's first `batches_done` batches at `world_size`."""
        rest = follow(self, lineage, epoch)
        return self.windows.drawn(rest.drawn + batches_done * world_size)

    def drawn_by_source(self, lineage: Sequence[Segment], batches_done: int, world_size: int,
                        epoch: int) -> tuple[np.ndarray, np.ndarray]:
        """`drawn_by`, per source of a mixture."""
        rest = follow(self, lineage, epoch)
        return self.windows.drawn_by_source(rest.drawn + batches_done * world_size)

    def rank_plan(self, rank: int, world_size: int) -> RankWindows:
        return RankWindows(self.windows, self.drawn, rank, world_size)


@dataclass(frozen=True)
class RankWindows:
    """Rank `rank`'s batches of a TokenStream: its b-th is global batch drawn + b*W + rank.
    A step exists while its first rank's batch does; a rank past the end then draws a
    padding repeat of what was left, so every rank runs the same steps."""

    windows: TokenWindows
    drawn: int
    rank: int
    world_size: int
    # The last global batches looked up: a batch is asked after several times (has, is_last,
    # padding, its ids and ranges), on the training thread.
    _recent: dict[int, Located | None] = field(default_factory=dict, compare=False, repr=False)

    def _locate(self, g: int) -> Located | None:
        if g not in self._recent:
            if len(self._recent) >= 8:
                self._recent.clear()
            self._recent[g] = self.windows.locate(g)
        return self._recent[g]

    def global_batch(self, b: int) -> int:
        return self.drawn + b * self.world_size + self.rank

    def has(self, b: int) -> bool:
        return b >= 0 and self._locate(self.drawn + b * self.world_size) is not None

    def is_last(self, b: int) -> bool:
        return self.has(b) and not self.has(b + 1)

    def padding(self, b: int) -> bool:
        return self._locate(self.global_batch(b)) is None

    def __len__(self) -> int:
        return -(-max(0, self.windows.total() - self.drawn) // self.world_size)

    def located(self, b: int) -> Located:
        """Batch b's window and place there (a padding batch: a real one of what was left)."""
        g = self.global_batch(b)
        at = self._locate(g)
        if at is None:
            left = self.windows.total() - self.drawn
            at = self.windows.locate(self.drawn + (g - self.drawn) % left)
            assert at is not None
        return at

    def cursor(self, batches_done: int) -> WindowStart:
        """The start of the window that holds the next step's first batch (or the last
        window's, at the end): what a saved state carries so a resume walks no windows."""
        at = self.windows.locate(self.drawn + batches_done * self.world_size)
        return at.start if at is not None else \
            self.windows.start(max(0, self.windows.num_windows - 1))
