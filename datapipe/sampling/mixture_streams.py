"""The building blocks of a mixture's order: each source's endless stream of samples, and ways
to interleave sources evenly, as whole numpy arrays (an epoch of millions of samples never takes
a Python step per sample).

A stream is its source's permutations back to back. A small source's come in blocks of
generator permutations (an up-weighted source of 10 samples may need 100,000 of them in one
epoch); a large source's permutation is a keyed shuffle computed per position
(sampling/index_shuffle.py), so a slice of it costs what the slice holds and no array the size
of the source is ever made.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Sequence
from fractions import Fraction

import numpy as np

from datapipe.sampling.index_shuffle import IndexShuffle

# Sources up to this size have their permutations drawn in blocks (one generator per block);
# larger ones are shuffled per position.
_BLOCK_SAMPLES = 1 << 16
# The latest blocks made in this process, for plans made epoch after epoch: an epoch takes one
# permutation of a block that holds hundreds of a small source's (a few MB at most).
_RECENT_BLOCKS: OrderedDict[tuple[int, int, int, int], np.ndarray] = OrderedDict()
_RECENT_LIMIT = 16


def stream_slice(size: int, seed: int, source: int, start: int, count: int, shuffle: bool,
                 cache: dict[tuple[int, int], np.ndarray] | None = None) -> np.ndarray:
    """Entries start .. start + count - 1 of source `source`'s stream: its permutations back to
    back, permutation c a pure function of (seed, source, c). Whatever the slicing, every sample
    comes once per permutation: up-sampling sees all of a source before any sample repeats,
    and consecutive slices of a down-sampled source walk through all of it. (`cache`: blocks
    of permutations kept for the caller's next slices of the same streams.)"""
    if count <= 0:
        return np.zeros(0, dtype=np.int64)
    if not shuffle:
        return (start + np.arange(count, dtype=np.int64)) % size
    if size > _BLOCK_SAMPLES:
        return _keyed_slice(size, seed, source, start, count)
    first, last = start // size, (start + count - 1) // size
    blocks = []
    for c in _block_starts(size, first, last):
        if cache is None or (source, c) not in cache:
            block = _recent_permutation(size, seed, source, c)
            if cache is not None:
                cache[source, c] = block
        blocks.append(block if cache is None else cache[source, c])
    perms = np.concatenate(blocks) if len(blocks) > 1 else blocks[0]
    base = _block_starts(size, first, last)[0]
    lo = start - base * size
    return perms[lo:lo + count]


def stream_at(size: int, seed: int, source: int, positions: np.ndarray,
              shuffle: bool) -> np.ndarray:
    """Entries `positions` of a source's stream, as stream_slice gives them, for positions
    that need not be contiguous (one rank's places of a window): a large source's shuffle is
    asked for those alone; a small source's come from a slice of its cached blocks."""
    positions = np.asarray(positions, dtype=np.int64)
    if len(positions) == 0:
        return np.zeros(0, dtype=np.int64)
    if not shuffle:
        return positions % size
    # A small source's stream comes in blocks of k permutations, a large one's in cycles of one
    # keyed shuffle: the positions are looked up piece by piece (usually one or two).
    span = size * _block_size(size) if size <= _BLOCK_SAMPLES else size
    first, last = int(positions.min()) // span, int(positions.max()) // span
    if first == last:
        return _stream_piece(size, seed, source, first, positions - first * span)
    piece = positions // span
    out = np.empty(len(positions), dtype=np.int64)
    for c in range(first, last + 1):
        chosen = piece == c
        if chosen.any():
            out[chosen] = _stream_piece(size, seed, source, c, positions[chosen] - c * span)
    return out


def _stream_piece(size: int, seed: int, source: int, piece: int,
                  into: np.ndarray) -> np.ndarray:
    """Entries `into` of block `piece` of a small source's stream, or of cycle `piece` of a
    large one's."""
    if size <= _BLOCK_SAMPLES:
        return _recent_permutation(size, seed, source, piece * _block_size(size))[into]
    return IndexShuffle(size, [seed, source, piece, 0x313C])(into)


def _keyed_slice(size: int, seed: int, source: int, start: int, count: int) -> np.ndarray:
    """stream_slice of a large source: permutation c is IndexShuffle keyed by (seed, source, c),
    asked for the positions the slice covers in it."""
    out = np.empty(count, dtype=np.int64)
    done = 0
    while done < count:
        cycle, into = divmod(start + done, size)
        take = min(count - done, size - into)
        shuffle = IndexShuffle(size, [seed, source, cycle, 0x313C])
        out[done:done + take] = shuffle(np.arange(into, into + take, dtype=np.int64))
        done += take
    return out


def _block_size(size: int) -> int:
    return max(1, _BLOCK_SAMPLES // size)


def _block_starts(size: int, first: int, last: int) -> list[int]:
    """The first permutation of each block that holds permutations first .. last."""
    k = _block_size(size)
    return list(range(first // k * k, last + 1, k))


def _recent_permutation(size: int, seed: int, source: int, block_start: int) -> np.ndarray:
    """_permutation, kept for the next epochs' plans (read-only: callers only slice it)."""
    key = (size, seed, source, block_start)
    block = _RECENT_BLOCKS.get(key)
    if block is None:
        block = _permutation(size, seed, source, block_start)
        block.flags.writeable = False
        _RECENT_BLOCKS[key] = block
        while len(_RECENT_BLOCKS) > _RECENT_LIMIT:
            _RECENT_BLOCKS.popitem(last=False)
    else:
        _RECENT_BLOCKS.move_to_end(key)
    return block


def _permutation(size: int, seed: int, source: int, block_start: int) -> np.ndarray:
    """Permutations block_start .. block_start + k - 1 of a source, back to back."""
    k = _block_size(size)
    rng = np.random.default_rng([seed, source, block_start, 0x313C])
    if k == 1:
        return rng.permutation(size)
    # Each row shuffled in place (Fisher-Yates): a tenth of the time of argsorting k x size
    # random keys.
    return rng.permuted(np.tile(np.arange(size, dtype=np.int64), (k, 1)), axis=1).ravel()


def even_merge(counts: Sequence[int]) -> np.ndarray:
    """A sequence holding source s counts[s] times, each source spread evenly over it: source
    s's k-th entry sits at (k + 1/2) / counts[s] of the way (ties to the earlier source), so
    any stretch of the sequence holds each source close to its share."""
    sizes = np.asarray(counts, dtype=np.int64)
    source = np.repeat(np.arange(len(sizes)), sizes)
    k = np.arange(len(source)) - np.repeat(np.cumsum(sizes) - sizes, sizes)
    key = (k + 0.5) / np.repeat(np.maximum(sizes, 1), sizes)
    return source[np.argsort(key, kind="stable")]


def spread_counts(units: int, size: int, shares: Sequence[Fraction],
                  quota: Sequence[int]) -> np.ndarray:
    """Per-source counts of `units` groups of `size` (units x sources) such that every group
    holds source s floor(size * share) or one more, and source s gets quota[s] in all.

    Each group has k places left after the floors. Those places are laid out column by column
    (the first extra place of every group, then the second, ...) and each source takes a run of
    quota[s] - units * floor of them: a run no longer than `units` meets a group at most once.
    Groups are ranked along the columns by a golden-ratio stride, so that a source's extra
    places land evenly through the groups, not in one burst.
    """
    floors = np.array([math.floor(size * s) for s in shares], dtype=np.int64)
    extra = np.asarray(quota, dtype=np.int64) - units * floors
    if units == 0:
        return np.zeros((0, len(shares)), dtype=np.int64)
    if extra.min() < 0 or extra.max() > units or extra.sum() != units * (size - floors.sum()):
        raise AssertionError(f"quota {list(quota)} cannot be spread over {units} x {size}")
    place = np.arange(int(extra.sum()), dtype=np.int64)
    source = np.searchsorted(np.cumsum(extra), place, side="right")
    group = (place % units) * _golden_stride_inverse(units) % units
    counts = np.bincount(group * len(shares) + source, minlength=units * len(shares))
    return counts.reshape(units, len(shares)) + floors


def _golden_stride_inverse(units: int) -> int:
    """The inverse (mod units) of a stride near units / golden ratio that is coprime to units:
    group g takes rank g * stride mod units, so consecutive ranks are groups far apart."""
    stride = max(1, round(units / ((1 + 5 ** 0.5) / 2)))
    while math.gcd(stride, units) != 1:
        stride += 1
    return pow(stride, -1, units) if units > 1 else 0
