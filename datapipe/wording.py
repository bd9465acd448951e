"""Counts and durations written the way people read them: '1 shard', '3 shards', '4.2 ms'."""

from __future__ import annotations


def plural(count: int, noun: str, many: str | None = None) -> str:
    """'1 shard', '2 shards', '12,000 samples'; `many` for nouns that add more than an s
    ('1 process', '2 processes')."""
    word = noun if count == 1 else many or f"{noun}s"
    return f"{count:,} {word}"


UNITS = ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs"), (1e-9, "ns"))


def format_duration(seconds: float) -> str:
    """Seconds in the unit that keeps three figures: '1.23 s', '45.6 ms', '812 µs', never
    '0.00 s' for a short but real time."""
    magnitude = abs(seconds)
    if magnitude == 0:
        return "0 s"
    # 0.9996 s is '1.00 s', not '1000 ms': a unit is chosen once the value rounds to 1 of it.
    scale, unit = next(((scale, unit) for scale, unit in UNITS if magnitude >= scale * 0.9995),
                       UNITS[-1])
    value = seconds / scale
    digits = 2 if abs(value) < 10 else 1 if abs(value) < 100 else 0
    return f"{value:.{digits}f} {unit}"
