"""decode="dali": the DALI producer behind `Loader`, checked against the CPU path (images,
extra columns, and a captioned dataset's drawn captions)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("nvidia.dali")

import datapipe as dp
import datapipe.cli
from datapipe.errors import ArgumentError, DataError
from datapipe.format import Dataset
from tests.captions_data import caption, clip_style_tokenizer, write_captioned_tar
from tests.conftest import convert
from tests.imagegen import make_image_folder
from tests.loader.helpers import check_resume_at_every_step, indices_of

CROP = dp.image.RandomResizedCrop(64) | dp.image.HorizontalFlip()
NUM_SAMPLES = 14  # not a multiple of the batch size: the last batch is partial


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """14 small JPEGs of varying sizes over uneven shards."""
    root = tmp_path_factory.mktemp("dali")
    src = make_image_folder(root / "src", classes=3, per_class=5, size=(72, 48))
    (src / "class_2" / "img_004.jpg").unlink()
    out = root / "out"
    convert("images", src, out, "--short-side", "48", "--shard-size", "12KB")
    return out


def _epoch(path: Path, decode: str = "dali", epoch: int = 0, **kwargs: object) -> list[dict]:
    kwargs = {"batch_size": 4, "num_workers": 1, "transform": CROP, **kwargs}
    with dp.Loader(path, decode=decode, **kwargs) as loader:
        loader.set_epoch(epoch)
        return list(loader)


def _mean_abs_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).abs().mean())


def test_every_sample_once_with_a_partial_last_batch(shards: Path) -> None:
    with Dataset(shards) as ds:
        labels = ds.scalar("label")
        assert len(ds) == NUM_SAMPLES and ds.num_shards > 1
    for epoch in range(2):
        batches = _epoch(shards, epoch=epoch)
        assert [len(b["index"]) for b in batches] == [4, 4, 4, 2]
        for batch in batches:
            image = batch["image"]
            assert image.shape == (len(batch["index"]), 3, 64, 64) and image.dtype == torch.uint8
            assert image.is_contiguous(memory_format=torch.channels_last)
            assert batch["label"].tolist() == labels[batch["index"].numpy()].tolist()
            assert not batch["is_padding"].any()
        assert sorted(indices_of(batches)) == list(range(NUM_SAMPLES))


def test_ranks_share_the_epoch_with_padding_flagged(shards: Path) -> None:
    seen, steps = [], set()
    for rank in range(3):
        batches = _epoch(shards, rank=rank, world_size=3)
        steps.add(len(batches))
        seen.extend(indices_of(batches))
        padding = sum(int(b["is_padding"].sum()) for b in batches)
        assert padding == (1 if rank == 2 else 0)  # 14 samples over 3 ranks of 5
    assert len(steps) == 1 and sorted(seen) == list(range(NUM_SAMPLES))


def test_extra_columns_as_on_the_cpu_path(tmp_path: Path) -> None:
    src = make_image_folder(tmp_path / "src", classes=2, per_class=3, size=(40, 40))
    lines = [json.dumps({"path": str(p.relative_to(src)), "label": i % 2, "weight": str(i / 2),
                         "caption": f"photo {i}"})
             for i, p in enumerate(sorted(src.rglob("*.jpg")))]
    (src / "list.jsonl").write_text("\n".join(lines) + "\n")
    convert("images", src / "list.jsonl", tmp_path / "out", "--short-side", "32")
    dali, cpu = _epoch(tmp_path / "out", "dali"), _epoch(tmp_path / "out", "cpu")
    for d, c in zip(dali, cpu, strict=True):
        assert d["weight"].dtype == torch.float64 and torch.equal(d["weight"], c["weight"])
        assert d["caption"] == c["caption"] and d["caption"][0].startswith("photo")


def test_same_geometry_and_nearly_the_same_pixels_as_cpu(shards: Path) -> None:
    # Crop boxes and flips are planned as on the CPU path, so only decoder/resampler rounding
    # differs.
    dali, cpu = _epoch(shards, "dali"), _epoch(shards, "cpu")
    for d, c in zip(dali, cpu, strict=True):
        assert d["index"].tolist() == c["index"].tolist()
        assert d["label"].tolist() == c["label"].tolist()
        assert d["image"].shape == c["image"].shape and d["image"].dtype == c["image"].dtype
        assert d["image"].stride() == c["image"].stride()
        assert _mean_abs_diff(d["image"], c["image"]) < 3


def test_center_crop_matches_cpu(shards: Path) -> None:
    center = dp.image.CenterCrop(40)
    dali = _epoch(shards, "dali", transform=center, shuffle=False, num_workers=0)
    cpu = _epoch(shards, "cpu", transform=center, shuffle=False, num_workers=0)
    for d, c in zip(dali, cpu, strict=True):
        assert d["image"].shape[1:] == (3, 40, 40)
        assert _mean_abs_diff(d["image"], c["image"]) < 3


def test_repeatable_for_a_seed(shards: Path) -> None:
    first, again = _epoch(shards, seed=3), _epoch(shards, seed=3)
    other = _epoch(shards, seed=4)
    for a, b in zip(first, again, strict=True):
        assert a["index"].tolist() == b["index"].tolist()
        assert torch.equal(a["image"], b["image"])
    assert not all(torch.equal(a["image"], b["image"]) for a, b in zip(first, other, strict=True))


def test_resume_mid_epoch_gives_the_same_batches(shards: Path) -> None:
    check_resume_at_every_step(lambda: dp.Loader(shards, batch_size=5, num_workers=1,
                                                 decode="dali", transform=CROP), epoch=1)


def test_an_abandoned_epoch_does_not_leak_into_the_next(shards: Path) -> None:
    def same(got: list[dict], want: list[dict]) -> bool:
        return [b["index"].tolist() for b in got] == [b["index"].tolist() for b in want] and \
            all(torch.equal(a["image"], b["image"]) for a, b in zip(got, want, strict=True))

    reference = [_epoch(shards, epoch=e) for e in range(3)]
    with dp.Loader(shards, batch_size=4, num_workers=1, decode="dali", transform=CROP) as loader:
        first = next(iter(loader))  # `break` after one batch: DALI still has batches in flight
        assert same([first], reference[0][:1])
        assert same(list(loader), reference[1])  # a new pass: the next epoch, whole
        assert same(list(loader), reference[2])


def test_corrupt_sample_names_shard_and_sample_or_is_skipped(tmp_path: Path) -> None:
    src = make_image_folder(tmp_path / "src", classes=1, per_class=5, size=(40, 40))
    out = tmp_path / "out"
    convert("images", src, out, "--short-side", "32", "--format", "msgpack")
    shard = next(out.glob("shard-*"))
    data = bytearray(shard.read_bytes())
    start = data.find(b"\xff\xd8\xff")  # first JPEG in the shard: break its header
    data[start:start + 40] = b"\x00" * 40
    shard.write_bytes(bytes(data))
    kwargs = {"batch_size": 2, "num_workers": 1, "shuffle": False, "decode": "dali",
              "transform": CROP}
    with dp.Loader(out, **kwargs) as loader, pytest.raises(DataError) as err:
        list(loader)
    assert shard.name in str(err.value) and "sample 0" in str(err.value)
    with dp.Loader(out, on_error="skip", **kwargs) as loader, \
            pytest.warns(UserWarning, match="skipped 1"):
        batches = list(loader)
    assert indices_of(batches) == [1, 2, 3, 4] and loader.skipped[0][0] == 0
    assert [tuple(b["image"].shape) for b in batches] == [(1, 3, 64, 64), (2, 3, 64, 64),
                                                           (1, 3, 64, 64)]


def test_a_batch_only_dali_fails_on_is_decoded_on_the_cpu(
        shards: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from datapipe.loader import dali_batches

    calls = []
    encoded = dali_batches._Feeder.encoded

    def garble_second_batch(self: dali_batches._Feeder, idx: np.ndarray) -> list:
        views = encoded(self, idx)
        calls.append(1)
        if len(calls) == 2:  # only what DALI is handed is broken, not the shard
            views[0] = np.zeros(100, dtype=np.uint8)
        return views

    monkeypatch.setattr(dali_batches._Feeder, "encoded", garble_second_batch)
    with pytest.warns(UserWarning, match="DALI failed on batch 1 ") as caught:
        dali = _epoch(shards, shuffle=False)
    assert len(caught) == 1
    cpu = _epoch(shards, "cpu", shuffle=False)
    assert [b["index"].tolist() for b in dali] == [b["index"].tolist() for b in cpu]
    assert torch.equal(dali[1]["image"], cpu[1]["image"])  # batch 1 came from the CPU path
    assert not torch.equal(dali[2]["image"], cpu[2]["image"])  # DALI again after it
    assert _mean_abs_diff(dali[2]["image"], cpu[2]["image"]) < 3


def test_raw_pixel_shards_are_refused(tmp_path: Path) -> None:
    src = make_image_folder(tmp_path / "src", classes=1, per_class=2, size=(40, 40))
    convert("images", src, tmp_path / "raw", "--short-side", "32", "--encoding", "raw")
    with pytest.raises(ArgumentError, match="decode='cpu'"):
        dp.Loader(tmp_path / "raw", decode="dali", transform=CROP)


def test_missing_dali_is_a_clear_error(shards: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "nvidia.dali", None)  # makes `import nvidia.dali` fail
    with pytest.raises(ArgumentError, match="pip install nvidia-dali"):
        dp.Loader(shards, decode="dali", transform=CROP)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_device_decodes_on_the_gpu(shards: Path) -> None:
    batches = _epoch(shards, device="cuda")
    cpu = _epoch(shards, "cpu")
    assert all(b["image"].is_cuda and b["image"].dtype == torch.uint8 for b in batches)
    assert sorted(indices_of(batches)) == list(range(NUM_SAMPLES))
    for d, c in zip(batches, cpu, strict=True):
        assert d["image"].shape == c["image"].shape
        # nvJPEG's chroma upsampling differs a little from libjpeg-turbo's.
        assert _mean_abs_diff(d["image"].cpu(), c["image"]) < 6
    assert np.asarray(batches[0]["index"].cpu()).shape == (4,)


def test_dali_inputs_are_prepared_off_the_iterating_thread_which_never_outlives_its_run(
        shards: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    from datapipe.loader import dali_batches

    threads = set()
    encoded = dali_batches._Feeder.encoded

    def recording(self: dali_batches._Feeder, idx: np.ndarray) -> list:
        threads.add(threading.current_thread().name)
        return encoded(self, idx)

    def feeding() -> list[str]:
        return [t.name for t in threading.enumerate() if t.name == "datapipe-dali-feed"]

    monkeypatch.setattr(dali_batches._Feeder, "encoded", recording)
    with dp.Loader(shards, batch_size=4, num_workers=1, decode="dali", transform=CROP) as loader:
        next(iter(loader))  # abandoned after one batch
        assert not feeding(), "an abandoned run's thread has gone"
        assert len(list(loader)) == 4  # every iter() is a new, complete pass
    assert threads == {"datapipe-dali-feed"} and not feeding()


def test_feeding_dali_is_reported_as_a_stage_of_the_iterating_thread(shards: Path) -> None:
    class Stages:
        def __init__(self) -> None:
            self.main: list[dict[str, float]] = []

        def on_batch(self, record: dict) -> None:
            self.main.append(record["main"])

    stages = Stages()
    with dp.Loader(shards, batch_size=4, num_workers=1, decode="dali", transform=CROP) as loader:
        loader.observer = stages
        list(loader)
    assert len(stages.main) == 4
    assert all(m["feed"] > 0 and {"collate", "transform"} <= set(m) for m in stages.main)


def test_gpu_outputs_are_bound_to_the_copy_stream_not_to_the_host(shards: Path) -> None:
    """outputs() alone blocks the host until the GPU is done; with a stream it does not."""
    class Pipe:
        def __init__(self) -> None:
            self.streams: list[object] = []

        def outputs(self, cuda_stream: object = None) -> tuple[str]:
            self.streams.append(cuda_stream)
            return ("images",)

    with dp.Loader(shards, batch_size=4, num_workers=1, decode="dali", transform=CROP) as loader:
        producer = loader._producer
    assert producer.output_stream is None  # device="cpu": no stream to bind to
    pipe, stream = Pipe(), object()
    producer._outputs(pipe)
    producer.output_stream = stream  # what device="cuda" sets, this DALI being able to
    assert producer._outputs(pipe) == ("images",) and pipe.streams == [None, stream]


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_batches_are_not_dali_memory(shards: Path) -> None:
    """Batches dropped while the consumer's stream is still busy reading them: DALI must not
    take their memory back meanwhile, and batches kept stay unchanged epochs later."""
    reference = [b["image"].cpu() for e in range(2) for b in _epoch(shards, device="cuda",
                                                                     epoch=e)]
    late, kept = [], []
    with dp.Loader(shards, batch_size=4, num_workers=1, decode="dali", transform=CROP,
                   device="cuda") as loader:
        for batch in loader:  # epoch 0: each batch dropped before its read has run
            torch.cuda._sleep(20_000_000)  # the read below queues behind this
            late.append(batch["image"].clone())
            del batch
        kept = [batch["image"] for batch in loader]  # epoch 1: kept
        for _ in range(2):  # DALI runs on: memory of its own would be reused by now
            list(loader)
    torch.cuda.synchronize()
    for got, want in zip(late + kept, reference, strict=True):
        assert torch.equal(got.cpu(), want)



# --- captions ----------------------------------------------------------------------------

CAPTION_FIELDS = ("index", "caption_index", "input_ids", "attention_mask")


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return clip_style_tokenizer(tmp_path_factory.mktemp("tok"))


def _captioned(folder: Path, tokenizer: Path, captions: list, first: int = 0) -> Path:
    write_captioned_tar(folder / "src" / "a.tar", captions, first)
    convert("images", folder / "src" / "a.tar", folder / "out", "--short-side", 24,
            "--workers", 1, "--tokenizer", tokenizer, "--shard-size", "12KB")
    return folder / "out"


@pytest.fixture(scope="module")
def five(tmp_path_factory: pytest.TempPathFactory, tokenizer: Path) -> Path:
    """14 images with five captions each, of different lengths, over uneven shards."""
    return _captioned(tmp_path_factory.mktemp("five"), tokenizer,
                      [[caption(n * 5 + k, words=2 + (n + k) % 7) for k in range(5)]
                       for n in range(14)])


def _same_captions(dali: list[dict], cpu: list[dict]) -> None:
    """The same batches of the same samples, with the same caption rows, batch by batch."""
    assert len(dali) == len(cpu)
    for b, (d, c) in enumerate(zip(dali, cpu, strict=True)):
        assert d.keys() == c.keys(), b
        for key in CAPTION_FIELDS + (("source",) if "source" in c else ()):
            assert d[key].dtype == c[key].dtype and torch.equal(d[key], c[key]), (b, key)


@pytest.mark.parametrize("kwargs", [
    {},  # the dataset's longest caption, padding="longest"
    {"captions": "openclip", "seed": 5},
    {"captions": "siglip", "rank": 2, "world_size": 3},  # a padding sample too
    {"captions": dp.Captions(context_length=4)},  # longer captions cut, end of text kept
], ids=["longest", "openclip", "siglip-rank", "cut"])
def test_captions_are_the_cpu_paths_batch_by_batch(five: Path, kwargs: dict) -> None:
    for epoch in (0, 3):  # another epoch draws other captions
        dali = _epoch(five, "dali", epoch, **kwargs)
        _same_captions(dali, _epoch(five, "cpu", epoch, **kwargs))
        assert all(d["input_ids"].shape[0] == d["image"].shape[0] for d in dali)
    assert len({int(c) for d in dali for c in d["caption_index"]}) > 1


def test_the_caption_rows_are_the_stored_ids_of_the_drawn_caption(five: Path) -> None:
    with Dataset(five) as ds:
        stored = {i: np.split(ds[i]["caption_ids"], np.cumsum(ds[i]["caption_lengths"])[:-1])
                  for i in range(len(ds))}
    for batch in _epoch(five, "dali", 1, captions="openclip"):
        assert batch["input_ids"].shape == (len(batch["index"]), 77)
        for i, c, row, mask in zip(batch["index"], batch["caption_index"], batch["input_ids"],
                                   batch["attention_mask"], strict=True):
            assert row[mask.bool()].tolist() == stored[int(i)][int(c)].tolist()
            assert not row[~mask.bool()].any()  # OpenCLIP pads with 0


def test_captions_resume_exactly_at_every_step(five: Path) -> None:
    check_resume_at_every_step(lambda: dp.Loader(five, batch_size=4, num_workers=1,
                                                 decode="dali", transform=CROP, seed=7,
                                                 captions="openclip"), epoch=3)


def test_a_mixture_of_captioned_datasets_matches_the_cpu_path_and_resumes(
        tmp_path: Path, five: Path, tokenizer: Path) -> None:
    other = _captioned(tmp_path / "one", tokenizer, [caption(n) for n in range(100, 109)], 100)

    def make(decode: str = "dali") -> dp.Loader:
        return dp.Loader({"five": five, "one": other}, batch_size=5, num_workers=1,
                         transform=CROP, seed=2, weights={"five": 0.6, "one": 0.4},
                         captions="clip", decode=decode)

    batches = []
    for decode in ("dali", "cpu"):
        with make(decode) as loader:
            loader.set_epoch(1)
            batches.append(list(loader))
    _same_captions(*batches)
    assert {int(s) for b in batches[0] for s in b["source"]} == {0, 1}
    check_resume_at_every_step(make, epoch=1)


def test_captions_are_padded_off_the_iterating_thread(five: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    from datapipe.loader.caption_batches import CaptionCollator

    threads = []
    fill = CaptionCollator.fill

    def recording(self: CaptionCollator, *args: object) -> dict:
        threads.append(threading.current_thread().name)
        return fill(self, *args)

    monkeypatch.setattr(CaptionCollator, "fill", recording)
    batches = _epoch(five, "dali", captions="openclip")
    assert all("input_ids" in b for b in batches)
    assert threads == ["datapipe-dali-feed"] * len(batches)


def test_a_batch_only_dali_fails_on_keeps_its_captions(
        five: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from datapipe.loader import dali_batches

    calls = []
    encoded = dali_batches._Feeder.encoded

    def garble_second_batch(self: dali_batches._Feeder, idx: np.ndarray) -> list:
        views = encoded(self, idx)
        calls.append(1)
        if len(calls) == 2:
            views[0] = np.zeros(100, dtype=np.uint8)
        return views

    monkeypatch.setattr(dali_batches._Feeder, "encoded", garble_second_batch)
    with pytest.warns(UserWarning, match="DALI failed on batch 1 "):
        dali = _epoch(five, "dali", 2, captions="siglip")
    cpu = _epoch(five, "cpu", 2, captions="siglip")
    assert torch.equal(dali[1]["image"], cpu[1]["image"])  # batch 1 came from the CPU path
    _same_captions(dali, cpu)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_cuda_the_caption_rows_arrive_with_the_images(five: Path) -> None:
    on_gpu = _epoch(five, "dali", device="cuda", captions="openclip")
    assert all(b["input_ids"].is_cuda and b["attention_mask"].is_cuda for b in on_gpu)
    _same_captions([{k: v.cpu() if isinstance(v, torch.Tensor) else v for k, v in b.items()}
                    for b in on_gpu], _epoch(five, "cpu", captions="openclip"))
