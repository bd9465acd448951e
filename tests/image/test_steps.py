"""The step protocol and where each step runs: refused compositions and placement rules."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import datapipe as dp
from datapipe.errors import ArgumentError
from datapipe.image import CenterCrop, ColorJitter, Normalize, RandomResizedCrop
from datapipe.image.placement import place_steps
from datapipe.image.transforms import Transform
from tests.conftest import convert
from tests.imagegen import make_image_folder


class MyStep(Transform):
    """A user's subclass of the base class, with no kind: it used to vanish from the pipeline."""


class Invert(dp.SampleStep):
    needs_uint8 = True

    def apply_sample(self, pixels: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        return 255 - pixels


class Darken(dp.BatchStep):
    def apply_batch(self, images, labels, generator):
        return images * 0.5, labels


class Both(dp.SampleStep, dp.BatchStep):
    """A step with both forms: per sample in CPU workers, per batch on CUDA."""

    def apply_sample(self, pixels: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        return np.zeros_like(pixels)

    def apply_batch(self, images, labels, generator):
        raise AssertionError("the batch form ran where the sample form should")


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("steps")
    src = make_image_folder(root / "src", classes=2, per_class=3, size=(48, 40))
    convert("images", src, root / "out", "--short-side", "40")
    return root / "out"


def test_an_unknown_transform_subclass_is_refused_by_name(shards: Path) -> None:
    with pytest.raises(ArgumentError, match="MyStep is not a step the loader can run"):
        CenterCrop(64) | MyStep()
    with pytest.raises(ArgumentError, match="MyStep is not a step"):
        dp.Loader(shards, num_workers=0, transform=MyStep())


def test_a_uint8_step_after_normalize_is_refused() -> None:
    with pytest.raises(ArgumentError, match="Invert works on uint8 pixels: put it before "
                                            "Normalize"):
        CenterCrop(8) | Normalize() | Invert()
    CenterCrop(8) | Invert() | Normalize()  # the right order


def test_the_pipeline_keeps_the_written_order() -> None:
    steps = (RandomResizedCrop(8) | Darken() | Invert() | Normalize()).pixel_steps
    assert [type(s).__name__ for s in steps] == ["Darken", "Invert", "Normalize"]


@pytest.mark.parametrize(("device", "workers", "batch"), [
    ("cpu", ["Both", "Normalize"], ["ColorJitter"]),
    ("cuda", [], ["Both", "Normalize", "ColorJitter"]),
])
def test_a_step_with_both_forms_runs_per_sample_only_on_the_cpu(device, workers, batch) -> None:
    pipeline = CenterCrop(8) | Both() | Normalize() | ColorJitter(0.1)
    view, rest = place_steps(pipeline, (8, 8), device, "cpu")
    assert [type(s).__name__ for s in view.worker_steps] == workers
    assert [type(s).__name__ for s in rest] == batch


def test_normalize_moves_to_the_workers_off_the_cpu_only_for_a_sample_step_after_it() -> None:
    step = dp.PerSample(np.negative)
    view, rest = place_steps(CenterCrop(8) | Normalize() | step, (8, 8), "cuda", "cpu")
    assert [type(s).__name__ for s in view.worker_steps] == ["Normalize", "PerSample"]
    assert view.pixel_dtype == "float32" and rest == ()
    view, rest = place_steps(CenterCrop(8) | Normalize(), (8, 8), "cuda", "cpu")
    assert view.worker_steps == () and [type(s).__name__ for s in rest] == ["Normalize"]


def test_a_sample_step_after_a_batch_step_is_refused(shards: Path) -> None:
    transform = CenterCrop(16) | ColorJitter(0.1) | dp.PerSample(np.negative, name="neg")
    with pytest.raises(ArgumentError, match=r"PerSample\(neg\) runs per sample in the workers"
                                            r".*after ColorJitter"):
        dp.Loader(shards, num_workers=0, transform=transform)


def test_dali_refuses_sample_steps_and_views_before_importing_dali(shards: Path) -> None:
    transform = CenterCrop(16) | dp.PerSample(np.negative, name="neg")
    with pytest.raises(ArgumentError, match=r"PerSample\(neg\) runs per sample in Python and "
                                            r"cannot run inside DALI's pipeline: use "
                                            r"decode='cpu', or a batch form"):
        dp.Loader(shards, num_workers=0, decode="dali", transform=transform)
    with pytest.raises(ArgumentError, match="views= needs decode='cpu'"):
        dp.Loader(shards, num_workers=0, decode="dali", views=(CenterCrop(16),))


def test_on_the_cpu_the_sample_form_runs_in_the_workers(shards: Path) -> None:
    with dp.Loader(shards, batch_size=6, num_workers=1,
                   transform=CenterCrop(16) | Both()) as loader:
        batch = next(iter(loader))
    assert batch["image"].dtype == torch.uint8 and not batch["image"].any()


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"fn": 3}, "PerSample takes a callable, got int"),
    ({"fn": np.negative, "shape": (8,)}, r"PerSample shape must be \(height, width\)"),
    ({"fn": np.negative, "shape": (8, 8, 4)}, "PerSample shape must be"),
    ({"fn": np.negative, "dtype": "int16"}, "PerSample dtype must be 'uint8' or 'float32'"),
    ({"fn": np.negative, "dtype": "pixels"}, "PerSample dtype must be 'uint8' or 'float32'"),
])
def test_per_sample_checks_its_arguments(kwargs: dict, message: str) -> None:
    with pytest.raises(ArgumentError, match=message):
        dp.PerSample(**kwargs)


def test_per_batch_checks_its_argument() -> None:
    with pytest.raises(ArgumentError, match="PerBatch takes a callable or torch module, got str"):
        dp.PerBatch("flip")


def test_transform_and_views_are_exclusive(shards: Path) -> None:
    with pytest.raises(ArgumentError, match="give transform= or views=, not both"):
        dp.Loader(shards, num_workers=0, transform=CenterCrop(8), views=(CenterCrop(8),))
    with pytest.raises(ArgumentError, match="views must be a tuple of one or more transforms"):
        dp.Loader(shards, num_workers=0, views=CenterCrop(8))
