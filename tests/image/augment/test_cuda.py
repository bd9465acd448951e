"""The batched steps on a CUDA batch give what they give on the CPU for the same generator:
the plan is drawn on the host from the batch's generator, whatever the device."""

from __future__ import annotations

import pytest
import torch

from datapipe.image.augment import (
    AutoAugment,
    Mixup,
    RandAugment,
    RandomErasing,
    TrivialAugmentWide,
)
from tests.image.augment.samples import as_batch, photo

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@pytest.mark.parametrize("step", [RandAugment(), RandAugment(3, 25, fill=(0, 128, 255)),
                                  TrivialAugmentWide(), AutoAugment(),
                                  RandomErasing(p=0.7, value=(0.1, 0.2, 0.3))], ids=repr)
def test_a_cuda_batch_gets_the_cpu_result(step) -> None:
    images = as_batch(*[photo(seed=s) for s in range(32)])
    on_cpu, _ = step.apply_batch(images.clone(), None, torch.Generator().manual_seed(7))
    on_gpu, _ = step.apply_batch(images.cuda(), None, torch.Generator().manual_seed(7))
    assert on_gpu.is_cuda
    near = (on_gpu.cpu() - on_cpu).abs() <= 1.5 / 255  # a byte's rounding
    assert near.float().mean() > 0.995  # nearest-neighbour ties may go either way


def test_random_noise_is_drawn_on_the_device_and_is_deterministic() -> None:
    step = RandomErasing(p=1.0)
    images = as_batch(*[photo(seed=s) for s in range(8)]).cuda()
    one, _ = step.apply_batch(images.clone(), None, torch.Generator().manual_seed(1))
    two, _ = step.apply_batch(images.clone(), None, torch.Generator().manual_seed(1))
    assert torch.equal(one, two) and not torch.equal(one, images)


@pytest.mark.parametrize("mode", ["batch", "pair", "elem"])
def test_mixup_on_cuda_is_mixup_on_the_cpu(mode: str) -> None:
    step = Mixup(mode=mode, num_classes=10)
    images = torch.rand(16, 3, 32, 32)
    labels = torch.randint(10, (16,))
    x_cpu, y_cpu = step.apply_batch(images.clone(), labels, torch.Generator().manual_seed(2))
    x_gpu, y_gpu = step.apply_batch(images.cuda(), labels.cuda(),
                                    torch.Generator().manual_seed(2))
    assert x_gpu.is_cuda and y_gpu.is_cuda
    torch.testing.assert_close(x_gpu.cpu(), x_cpu)
    torch.testing.assert_close(y_gpu.cpu(), y_cpu)
