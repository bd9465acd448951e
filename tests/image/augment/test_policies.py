"""RandAugment, TrivialAugmentWide and AutoAugment: their tables against torchvision's
published numbers, the plans they draw, and their determinism on both paths."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from datapipe.errors import ArgumentError, DataError
from datapipe.image.augment import AutoAugment, RandAugment, TrivialAugmentWide
from datapipe.image.augment.policies import (
    AUTO_AUGMENT,
    IMAGENET_POLICY,
    RAND_AUGMENT,
    TRIVIAL_AUGMENT_WIDE,
)
from tests.image.augment.samples import as_batch, photo

# From torchvision/transforms/v2/_auto_augment.py (_AUGMENTATION_SPACE of each class):
# op -> (magnitude of the first bin, of the last bin, signed); translations at 224 x 224.
TV_RAND_AUGMENT = {
    "Identity": None, "ShearX": (0.0, 0.3, True), "ShearY": (0.0, 0.3, True),
    "TranslateX": (0.0, 150.0 / 331.0 * 224, True), "TranslateY": (0.0, 150.0 / 331.0 * 224, True),
    "Rotate": (0.0, 30.0, True), "Brightness": (0.0, 0.9, True), "Color": (0.0, 0.9, True),
    "Contrast": (0.0, 0.9, True), "Sharpness": (0.0, 0.9, True), "Posterize": (8, 4, False),
    "Solarize": (1.0, 0.0, False), "AutoContrast": None, "Equalize": None,
}
TV_TRIVIAL_AUGMENT_WIDE = {
    "Identity": None, "ShearX": (0.0, 0.99, True), "ShearY": (0.0, 0.99, True),
    "TranslateX": (0.0, 32.0, True), "TranslateY": (0.0, 32.0, True),
    "Rotate": (0.0, 135.0, True), "Brightness": (0.0, 0.99, True), "Color": (0.0, 0.99, True),
    "Contrast": (0.0, 0.99, True), "Sharpness": (0.0, 0.99, True), "Posterize": (8, 2, False),
    "Solarize": (1.0, 0.0, False), "AutoContrast": None, "Equalize": None,
}
TV_AUTO_AUGMENT = {**{op: r for op, r in TV_RAND_AUGMENT.items() if op != "Identity"},
                   "Invert": None}
# Posterize's bits per bin: 8 - arange(bins) / ((bins - 1) / drop), rounded.
TV_POSTERIZE_31_OF_4 = [8] * 4 + [7] * 8 + [6] * 7 + [5] * 8 + [4] * 4
TV_POSTERIZE_31_OF_6 = [8] * 3 + [7] * 5 + [6] * 5 + [5] * 5 + [4] * 5 + [3] * 5 + [2] * 3
TV_POSTERIZE_10_OF_4 = [8, 8, 7, 7, 6, 6, 5, 5, 4, 4]
# AutoAugmentPolicy.IMAGENET: 25 sub-policies of (op, probability, magnitude bin).
TV_IMAGENET = [
    (("Posterize", 0.4, 8), ("Rotate", 0.6, 9)),
    (("Solarize", 0.6, 5), ("AutoContrast", 0.6, None)),
    (("Equalize", 0.8, None), ("Equalize", 0.6, None)),
    (("Posterize", 0.6, 7), ("Posterize", 0.6, 6)),
    (("Equalize", 0.4, None), ("Solarize", 0.2, 4)),
    (("Equalize", 0.4, None), ("Rotate", 0.8, 8)),
    (("Solarize", 0.6, 3), ("Equalize", 0.6, None)),
    (("Posterize", 0.8, 5), ("Equalize", 1.0, None)),
    (("Rotate", 0.2, 3), ("Solarize", 0.6, 8)),
    (("Equalize", 0.6, None), ("Posterize", 0.4, 6)),
    (("Rotate", 0.8, 8), ("Color", 0.4, 0)),
    (("Rotate", 0.4, 9), ("Equalize", 0.6, None)),
    (("Equalize", 0.0, None), ("Equalize", 0.8, None)),
    (("Invert", 0.6, None), ("Equalize", 1.0, None)),
    (("Color", 0.6, 4), ("Contrast", 1.0, 8)),
    (("Rotate", 0.8, 8), ("Color", 1.0, 2)),
    (("Color", 0.8, 8), ("Solarize", 0.8, 7)),
    (("Sharpness", 0.4, 7), ("Invert", 0.6, None)),
    (("ShearX", 0.6, 5), ("Equalize", 1.0, None)),
    (("Color", 0.4, 0), ("Equalize", 0.6, None)),
    (("Equalize", 0.4, None), ("Solarize", 0.2, 4)),
    (("Solarize", 0.6, 5), ("AutoContrast", 0.6, None)),
    (("Invert", 0.6, None), ("Equalize", 1.0, None)),
    (("Color", 0.6, 4), ("Contrast", 1.0, 8)),
    (("Equalize", 0.8, None), ("Equalize", 0.6, None)),
]


@pytest.mark.parametrize(("space", "published", "bins", "posterize"), [
    (RAND_AUGMENT, TV_RAND_AUGMENT, 31, TV_POSTERIZE_31_OF_4),
    (TRIVIAL_AUGMENT_WIDE, TV_TRIVIAL_AUGMENT_WIDE, 31, TV_POSTERIZE_31_OF_6),
    (AUTO_AUGMENT, TV_AUTO_AUGMENT, 10, TV_POSTERIZE_10_OF_4),
], ids=["RandAugment", "TrivialAugmentWide", "AutoAugment"])
def test_op_tables_are_torchvisions(space, published, bins, posterize) -> None:
    assert list(space) == list(published)  # the ops, in torchvision's order (it draws by index)
    for op, expected in published.items():
        values = space[op].magnitudes(op, bins, 224, 224)
        if expected is None:
            assert values is None, op
            continue
        first, last, signed = expected
        assert space[op].signed == signed, op
        if op == "Posterize":
            assert values.tolist() == posterize
        else:
            np.testing.assert_allclose(values, np.linspace(first, last, bins), rtol=1e-6)


def test_imagenet_policy_is_torchvisions() -> None:
    assert [tuple(sub) for sub in IMAGENET_POLICY] == TV_IMAGENET


def test_translations_scale_with_the_side_they_move_along() -> None:
    x = RAND_AUGMENT["TranslateX"].magnitudes("TranslateX", 31, 100, 331)
    y = RAND_AUGMENT["TranslateY"].magnitudes("TranslateY", 31, 100, 331)
    assert x[-1] == pytest.approx(150.0) and y[-1] == pytest.approx(150.0 / 331.0 * 100)


def test_rand_augment_draws_every_op_at_its_one_magnitude() -> None:
    step = RandAugment(num_ops=2, magnitude=9)
    ops, magnitudes = step._plan(np.random.default_rng(0).random((3000, 4)), 224, 224)
    assert ops.shape == (3000, 2) and set(ops.ravel()) == set(TV_RAND_AUGMENT)
    for op, expected in TV_RAND_AUGMENT.items():
        drawn = magnitudes[ops == op]
        if expected is None:
            assert set(drawn) == {0.0}
        elif op == "Posterize":
            assert set(drawn) == {TV_POSTERIZE_31_OF_4[9]}
        else:
            size = np.linspace(expected[0], expected[1], 31)[9]
            assert set(np.round(np.abs(drawn), 5)) == {round(size, 5)}, op
            assert (drawn < 0).any() == expected[2] and (drawn > 0).any(), op


def test_trivial_augment_draws_one_op_at_any_bin() -> None:
    ops, magnitudes = TrivialAugmentWide()._plan(
        np.random.default_rng(1).random((5000, 3)), 224, 224)
    assert ops.shape == (5000, 1)
    rotations = np.abs(magnitudes[ops == "Rotate"])
    np.testing.assert_allclose(np.unique(rotations.round(5)), np.linspace(0, 135, 31).round(5))


def test_auto_augment_applies_each_op_with_its_probability() -> None:
    ops, magnitudes = AutoAugment()._plan(np.random.default_rng(2).random((20000, 5)), 224, 224)
    # Sub-policy 13 is (Invert 0.6, Equalize 1.0): the only Invert-first one besides 22.
    invert_first = (ops[:, 0] == "Invert").mean()
    assert invert_first == pytest.approx(2 / 25 * 0.6, abs=0.01)
    # (Equalize, 0.0) never runs; Rotate's magnitudes are bins 3, 8 and 9 of 0..30 in 10.
    rotations = np.unique(np.abs(magnitudes[ops == "Rotate"]).round(4))
    np.testing.assert_allclose(rotations, np.linspace(0, 30, 10)[[3, 8, 9]].round(4))


@pytest.mark.parametrize("step", [RandAugment(), RandAugment(4, 20, fill=(9, 9, 9)),
                                  TrivialAugmentWide(), AutoAugment()], ids=repr)
def test_same_seed_same_pixels_on_both_paths(step) -> None:
    image = photo()
    first = [step.apply_sample(image, np.random.default_rng(s)) for s in range(12)]
    again = [step.apply_sample(image, np.random.default_rng(s)) for s in range(12)]
    assert all(np.array_equal(a, b) for a, b in zip(first, again, strict=True))
    assert len({a.tobytes() for a in first}) > 6  # the seeds draw different ops
    assert all(a.flags.writeable for a in first)  # a later step may write in place
    assert np.array_equal(image, photo())  # the input is left as it was

    batch = [photo(seed=s) for s in range(12)]
    one, _ = step.apply_batch(as_batch(*batch), None, torch.Generator().manual_seed(5))
    two, _ = step.apply_batch(as_batch(*batch), None, torch.Generator().manual_seed(5))
    other, _ = step.apply_batch(as_batch(*batch), None, torch.Generator().manual_seed(6))
    assert torch.equal(one, two) and not torch.equal(one, other)
    assert one.dtype == torch.float32 and one.min() >= 0 and one.max() <= 1


def test_labels_pass_through_the_batch_path() -> None:
    labels = torch.arange(4)
    _, out = RandAugment().apply_batch(as_batch(*[photo()] * 4), labels,
                                       torch.Generator().manual_seed(0))
    assert out is labels


def test_the_sample_path_refuses_pixels_that_are_not_rgb_bytes() -> None:
    with pytest.raises(DataError, match="RandAugment takes H x W x 3 uint8 pixels, got float32"):
        RandAugment().apply_sample(photo().astype(np.float32), np.random.default_rng(0))


@pytest.mark.parametrize(("make", "message"), [
    (lambda: RandAugment(num_ops=-1), "RandAugment num_ops must be a whole number >= 0, got -1"),
    (lambda: RandAugment(num_ops=1.5), "RandAugment num_ops must be"),
    (lambda: RandAugment(magnitude=31), r"RandAugment magnitude must be a whole number in "
                                        r"\[0, 30\], got 31"),
    (lambda: RandAugment(magnitude=5, num_magnitude_bins=5), r"magnitude must be .* \[0, 4\]"),
    (lambda: RandAugment(magnitude=True), "RandAugment magnitude must be"),
    (lambda: RandAugment(num_magnitude_bins=1), "RandAugment num_magnitude_bins must be"),
    (lambda: RandAugment(fill=300), r"RandAugment fill must be a pixel value in \[0, 255\]"),
    (lambda: RandAugment(fill=(1, 2)), "RandAugment fill must be"),
    (lambda: TrivialAugmentWide(num_magnitude_bins=0), "TrivialAugmentWide num_magnitude_bins"),
    (lambda: TrivialAugmentWide(fill="black"), "TrivialAugmentWide fill must be"),
    (lambda: AutoAugment(policy="cifar10"), "AutoAugment policy must be 'imagenet' .* got "
                                            "'cifar10'"),
    (lambda: AutoAugment(fill=-1), "AutoAugment fill must be"),
])
def test_bad_arguments_are_refused_when_made(make, message) -> None:
    with pytest.raises(ArgumentError, match=message):
        make()


def test_needs_uint8() -> None:
    assert RandAugment.needs_uint8 and TrivialAugmentWide.needs_uint8 and AutoAugment.needs_uint8
