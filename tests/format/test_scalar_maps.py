"""A dataset's scalar columns as memory maps shared by the node (scalar_maps.py): built once
from the shards, mapped by every later process without opening a shard, safe to build from
several processes at once, rebuilt when damaged, and private arrays where the dataset's folder
cannot be written."""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import datapipe as dp
from datapipe.format import Dataset
from datapipe.format.stamped_files import mapped_file
from tests.conftest import convert
from tests.imagegen import make_image_folder

FORMATS = ["arrow", "msgpack"]
SCALARS = ("label", "height", "width")
_CAPABILITY_VERSION_3 = 0x20080522
_FILE_OVERRIDES = (1, 2, 3)  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """15 images of 3 classes, in several shards, in both formats."""
    root = tmp_path_factory.mktemp("images")
    src = make_image_folder(root / "src", classes=3, per_class=5, size=(40, 32))
    for fmt in FORMATS:
        convert("images", src, root / fmt, "--short-side", "24", "--shard-size", "6KB",
                "--format", fmt)
    return {fmt: root / fmt for fmt in FORMATS}


def _copy(source: Path, target: Path) -> Path:
    return Path(shutil.copytree(source, target))


def _stored(directory: Path) -> dict[str, np.ndarray]:
    """Each column as the shards hold it, read shard by shard."""
    with Dataset(directory) as ds:
        return {name: ds.scalar(name) for name in SCALARS}


def _index_files(directory: Path) -> list[Path]:
    return sorted(directory.glob(".datapipe-scalars-*.npy"))


def _mapped_shards(directory: Path) -> list[str]:
    """The dataset's shard files this process has mapped."""
    lines = Path("/proc/self/maps").read_text().splitlines()
    return [line for line in lines if f"{directory}/shard-" in line]


@pytest.mark.parametrize("fmt", FORMATS)
def test_columns_are_built_once_then_mapped_without_opening_a_shard(
        images: dict[str, Path], tmp_path: Path, fmt: str) -> None:
    out = _copy(images[fmt], tmp_path / "ds")
    stored = _stored(out)
    with Dataset(out) as ds:
        first = {name: ds.scalar_map(name) for name in SCALARS}
    files = _index_files(out)
    assert len(files) == len(SCALARS), "one file per scalar column"
    built = {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in files}
    with Dataset(out) as ds:
        again = {name: ds.scalar_map(name) for name in SCALARS}
        assert not _mapped_shards(out), "no shard opened to read them"
        assert ds.scalar_range("label") == (0, 2)
        for name in SCALARS:
            assert mapped_file(again[name]) is not None
            assert Path(mapped_file(again[name])).parent == out
            assert mapped_file(again[name]) == mapped_file(first[name])
            assert again[name].dtype == ds.manifest.column(name).numpy_dtype  # int32 sizes
            np.testing.assert_array_equal(again[name], stored[name])
    assert {p.name: (p.stat().st_ino, p.stat().st_mtime_ns)
            for p in _index_files(out)} == built, "not built again"


def _map_at_once(directory: str, ready: Any, results: Any) -> None:
    ready.wait()
    try:
        with Dataset(directory) as ds:
            results.put({name: (str(mapped_file(ds.scalar_map(name))), ds.scalar_map(name).tolist())
                         for name in SCALARS})
    except Exception as exc:  # the test's failure, shown in the parent
        results.put(repr(exc))


def test_processes_building_at_once_agree_on_one_set_of_files(images: dict[str, Path],
                                                               tmp_path: Path) -> None:
    out = _copy(images["msgpack"], tmp_path / "ds")
    stored = _stored(out)
    context = multiprocessing.get_context("fork")
    ready, results = context.Barrier(4), context.Queue()
    workers = [context.Process(target=_map_at_once, args=(str(out), ready, results))
               for _ in range(4)]
    for worker in workers:
        worker.start()
    seen = [results.get(timeout=60) for _ in workers]
    for worker in workers:
        worker.join(timeout=60)
    assert all(isinstance(s, dict) for s in seen), seen
    assert all(s == seen[0] for s in seen)
    assert {name: values for name, (_, values) in seen[0].items()} == \
        {name: values.tolist() for name, values in stored.items()}
    assert len(_index_files(out)) == len(SCALARS)
    assert not list(out.glob("*.tmp"))


def _damage(path: Path, keep_stamp: bool) -> None:
    """Flip the lowest bit of a saved column's last value, keeping the file's size, and its
    mtime too with `keep_stamp`."""
    stat = path.stat()
    data = bytearray(path.read_bytes())
    data[-np.load(path, mmap_mode="r").dtype.itemsize] ^= 0x01  # little-endian: its lowest byte
    path.write_bytes(bytes(data))
    if keep_stamp:
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))


def _label_file(directory: Path) -> Path:
    with Dataset(directory) as ds:
        return Path(mapped_file(ds.scalar_map("label")))


@pytest.mark.parametrize("damage", ["a value", "cut short", "no summary"])
def test_a_damaged_column_is_rebuilt(images: dict[str, Path], tmp_path: Path,
                                     damage: str) -> None:
    out = _copy(images["arrow"], tmp_path / "ds")
    stored = _stored(out)
    path = _label_file(out)
    if damage == "a value":
        _damage(path, keep_stamp=False)
    elif damage == "cut short":
        path.write_bytes(path.read_bytes()[:-3])
    else:
        path.with_suffix(".json").unlink()
    with Dataset(out) as ds:
        np.testing.assert_array_equal(ds.scalar_map("label"), stored["label"])
    assert np.array_equal(np.load(path), stored["label"]), "the file holds the right values"
    assert len(_index_files(out)) == len(SCALARS)


def test_an_unchanged_column_is_trusted_and_verify_open_hashes_it(images: dict[str, Path],
                                                                  tmp_path: Path) -> None:
    """A file whose size and mtime are those it was checked with is not hashed at every start
    (that would read a billion values); verify="open" hashes it whatever its stamp."""
    out = _copy(images["arrow"], tmp_path / "ds")
    stored = _stored(out)["label"]
    _damage(_label_file(out), keep_stamp=True)
    with Dataset(out) as ds:
        assert ds.scalar_map("label")[-1] == stored[-1] ^ 1, "trusted: not hashed"
    with Dataset(out, verify="open") as ds:
        np.testing.assert_array_equal(ds.scalar_map("label"), stored)
    with Dataset(out) as ds:
        np.testing.assert_array_equal(ds.scalar_map("label"), stored)


def test_another_manifest_gets_its_own_files(images: dict[str, Path], tmp_path: Path) -> None:
    out = _copy(images["arrow"], tmp_path / "ds")
    before = _label_file(out)
    manifest = out / "manifest.json"
    manifest.write_text(manifest.read_text().replace("class_2", "class_two"))
    with Dataset(out) as ds:
        assert Path(mapped_file(ds.scalar_map("label"))) != before


def _drop_file_overrides() -> None:
    """Take the capabilities that let root ignore file modes (CAP_DAC_OVERRIDE,
    CAP_DAC_READ_SEARCH, CAP_FOWNER) out of this process: it then meets a folder's mode as its
    owner does. Nothing for another user to drop."""
    libc = ctypes.CDLL(None, use_errno=True)
    header = (ctypes.c_uint32 * 2)(_CAPABILITY_VERSION_3, 0)  # this process
    data = (ctypes.c_uint32 * 6)()  # (effective, permitted, inheritable) x 2 words
    if libc.capget(header, data) != 0:
        raise OSError(ctypes.get_errno(), "capget")
    data[0] &= ~sum(1 << cap for cap in _FILE_OVERRIDES)
    if libc.capset(header, data) != 0:
        raise OSError(ctypes.get_errno(), "capset")


def _without_write_access(folder: Path, call: Callable[[], Any]) -> Any:
    """`call()` in a child process that cannot write `folder` (mode 555, and as root without
    the capabilities that would let it), having made sure it cannot."""
    context = multiprocessing.get_context("fork")
    results = context.Queue()

    def child() -> None:
        try:
            _drop_file_overrides()
            with pytest.raises(PermissionError):
                (folder / "probe").write_bytes(b"")
            results.put(("ok", call()))
        except BaseException as exc:  # the test's failure, shown in the parent
            results.put(("error", repr(exc)))

    process = context.Process(target=child)
    process.start()
    outcome, value = results.get(timeout=120)
    process.join(timeout=60)
    assert outcome == "ok", value
    return value


def test_a_folder_that_cannot_be_written_reads_the_columns_into_memory(
        images: dict[str, Path], tmp_path: Path) -> None:
    out = _copy(images["arrow"], tmp_path / "ds")
    stored = _stored(out)
    out.chmod(0o555)

    def read() -> dict[str, Any]:
        with Dataset(out) as ds:
            labels = ds.scalar_map("label")
            mapped = mapped_file(labels) is not None
        with dp.Loader(out, batch_size=15, num_workers=2, shuffle=False,
                       transform=dp.image.CenterCrop(16)) as loader:
            batch = next(iter(loader))
        return {"mapped": mapped, "labels": labels.tolist(),
                "batch": batch["label"].tolist(), "index": batch["index"].tolist()}

    try:
        seen = _without_write_access(out, read)
    finally:
        out.chmod(0o755)
    assert not seen["mapped"] and seen["labels"] == stored["label"].tolist()
    assert seen["batch"] == stored["label"][seen["index"]].tolist()
    assert not list(out.glob(".datapipe-scalars-*"))
