"""Counts and durations as people read them: '1 shard', never '1 shards'; '393 µs', never
'0.00 s'."""

from __future__ import annotations

import pytest

from datapipe.wording import format_duration, plural


def test_one_is_singular_and_the_rest_plural() -> None:
    assert plural(1, "shard") == "1 shard"
    assert plural(0, "shard") == "0 shards"
    assert plural(12_000, "sample") == "12,000 samples"
    assert plural(1, "batch", "batches") == "1 batch"
    assert plural(2, "process", "processes") == "2 processes"


@pytest.mark.parametrize("seconds, words", [
    (0.0, "0 s"), (2.345, "2.35 s"), (123.4, "123 s"), (0.0456, "45.6 ms"),
    (0.00812, "8.12 ms"), (0.000393, "393 µs"), (3e-7, "300 ns"),
    (0.9996, "1.00 s"),  # rounds up into the larger unit, not "1000 ms"
    (0.00099951, "1.00 ms"),
])
def test_durations_keep_three_figures_in_a_unit_that_fits(seconds: float, words: str) -> None:
    assert format_duration(seconds) == words


def test_a_short_time_is_never_zero_seconds() -> None:
    for seconds in (0.004, 0.0004, 0.00004, 0.000004):
        assert not format_duration(seconds).startswith("0.0")
