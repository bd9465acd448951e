"""A mixture's weights: what is accepted, what is refused in one line naming the argument, and
the largest-remainder split every quota comes from."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import pytest

from datapipe.errors import ArgumentError
from datapipe.sampling.mixture_weights import MixtureWeights, WeightSchedule, apportion

NAMES = ("web", "code", "books")


def test_a_list_or_a_dict_gives_the_weights_in_the_sources_order() -> None:
    assert MixtureWeights.parse([3, 1, 0], NAMES).values == (3, 1, 0)
    assert MixtureWeights.parse({"books": 1, "web": 7, "code": 2}, NAMES).values == (7, 2, 1)
    assert MixtureWeights.parse([6, 3, 1], NAMES).shares == (Fraction(3, 5), Fraction(3, 10),
                                                             Fraction(1, 10))
    # The stored floats, exactly: their sum, a float, is not 1.0; the shares' sum is.
    assert sum(MixtureWeights.parse((0.7, 0.2, 0.1), NAMES).shares) == 1


@pytest.mark.parametrize("weights, message", [
    ([1, -1, 1], "weights[1] must be a finite number >= 0, got -1"),
    ([1, math.nan, 1], "weights[1] must be a finite number >= 0, got nan"),
    ([math.inf, 1, 1], "weights[0] must be a finite number >= 0, got inf"),
    ([0, 0, 0.0], "weights: all weights are zero"),
    ([1, 1], "weights has 2 weights for 3 sources"),
    ({"web": 1, "code": 1, "books": 1, "math": 1}, "weights: unknown source 'math'"),
    ({"web": 1, "code": 1}, "weights: no weight for source 'books'"),
    ([1, "2", 1], "weights[1] must be a number, got '2'"),
    ([1, True, 1], "weights[1] must be a number, got True"),
    ("111", "weights must be a list or a dict name -> weight"),
    (0.5, "weights must be a list or a dict name -> weight"),
])
def test_bad_weights_are_refused_in_one_line(weights: object, message: str) -> None:
    with pytest.raises(ArgumentError) as err:
        WeightSchedule.parse(weights, NAMES)  # type: ignore[arg-type]
    assert message in str(err.value) and "\n" not in str(err.value)


def test_phases_are_pairs_of_start_step_and_weights() -> None:
    schedule = WeightSchedule.parse([(0, [1, 1, 1]), (900, {"web": 1, "code": 0, "books": 3})],
                                    NAMES)
    assert [p.start_step for p in schedule.phases] == [0, 900]
    assert schedule.phases[1].weights.values == (1, 0, 3)
    assert schedule.spans(850, 100) == [(0, 50, schedule.phases[0].weights),
                                        (50, 100, schedule.phases[1].weights)]
    assert schedule.spans(1000, 10) == [(0, 10, schedule.phases[1].weights)]


@pytest.mark.parametrize("phases, message", [
    ([(5, [1, 1, 1])], "the first phase must start at step 0, got [5]"),
    ([(0, [1, 1, 1]), (10, [1, 1, 1]), (10, [1, 2, 1])], "must increase, got 10 then 10"),
    ([(0, [1, 1, 1]), (10, [1, 1, 1]), (4, [1, 2, 1])], "must increase, got 10 then 4"),
    ([(0, [1, 1, 1]), (-3, [1, 1, 1])], "weights[1]: start_step must be an int >= 0, got -3"),
    ([(0, [1, 1, 1]), (2.5, [1, 1, 1])], "weights[1]: start_step must be an int >= 0"),
    ([(0, [1, 1, 1]), (9, [1, -2, 1])], "weights[1][1][1] must be a finite number >= 0"),
    ([(0, [1, 1, 1]), (9, [1, 1])], "weights[1][1] has 2 weights for 3 sources"),
    ([(0, [1, 1, 1]), (9, [0, 0, 0])], "weights[1][1]: all weights are zero"),
    ([(0, [1, 1, 1]), (9, [1, 1, 1], 3)], "weights[1] must be a (start_step, weights) pair"),
])
def test_bad_phases_are_refused_in_one_line(phases: object, message: str) -> None:
    with pytest.raises(ArgumentError) as err:
        WeightSchedule.parse(phases, NAMES)  # type: ignore[arg-type]
    assert message in str(err.value) and "\n" not in str(err.value)


def test_apportion_gives_floor_or_ceiling_and_the_exact_total() -> None:
    for weights in itertools.product(range(4), repeat=3):
        if not any(weights):
            continue
        shares = MixtureWeights(weights).shares
        for total in range(40):
            parts = apportion(total, shares)
            assert sum(parts) == total
            for part, share in zip(parts, shares, strict=True):
                assert math.floor(total * share) <= part <= math.ceil(total * share)


def test_apportion_is_exact_where_floats_are_not() -> None:
    # 0.1 + 0.2 != 0.3 in floats; the split of 10 by (0.1, 0.2, 0.7) is still (1, 2, 7).
    assert apportion(10, MixtureWeights((0.1, 0.2, 0.7)).shares) == [1, 2, 7]
    assert apportion(3, MixtureWeights((1, 1, 1)).shares) == [1, 1, 1]
    assert apportion(2, MixtureWeights((1, 1, 1)).shares) == [1, 1, 0]  # ties: earlier first
