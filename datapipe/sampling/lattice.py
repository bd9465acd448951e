"""Counting the multiples of a stride that land below a bound, modulo m, in O(log m) steps.

A mixture spreads each source's extra places over a batch's groups by a stride (group of
place q: q * inv mod U), so how many of a source's extra places went to the groups before a
window is such a count. With the floor-sum identity it costs a few integer steps instead of a
pass over every group before the window.
"""

from __future__ import annotations


def floor_sum(n: int, m: int, a: int, b: int) -> int:
    """sum(floor((a * i + b) / m) for i in range(n)), for n, a, b >= 0 and m >= 1: the
    Euclid-like reduction (swap the roles of a and m until a * n + b < m). Python ints: no
    overflow at any size."""
    total = 0
    while True:
        if a >= m:
            total += n * (n - 1) // 2 * (a // m)
            a %= m
        if b >= m:
            total += n * (b // m)
            b %= m
        top = a * n + b
        if top < m:
            return total
        n, b = divmod(top, m)
        m, a = a, m


def residues_below(count: int, step: int, modulus: int, bound: int) -> int:
    """How many q in 0 .. count - 1 have (q * step) mod modulus < bound (0 <= bound <=
    modulus): [r >= t] for r = x mod m is floor((x + m - t) / m) - floor(x / m)."""
    at_or_above = (floor_sum(count, modulus, step, modulus - bound)
                   - floor_sum(count, modulus, step, 0))
    return count - at_or_above
