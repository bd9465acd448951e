"""Datasets in object storage, against a real S3 server on loopback (moto, tests/s3server.py):
the loaders read s3:// as they read a folder, the CLI takes URLs, convert uploads, and the
node-local cache stays correct when it is small, shared by processes, or a download dies."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import torch

import datapipe as dp
from datapipe.format import Dataset
from datapipe.format.cache import CacheSettings
from datapipe.format.stamped_files import mapped_file
from tests.conftest import convert
from tests.imagegen import make_image_folder
from tests.s3server import get_object, list_keys, put_object, upload_directory

CROP = dp.image.CenterCrop(32)


@pytest.fixture(scope="module")
def image_shards(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """60 images in about 10 small shards."""
    root = tmp_path_factory.mktemp("images")
    src = make_image_folder(root / "src", classes=3, per_class=20)
    convert("images", src, root / "shards", "--short-side", "48", "--shard-size", "20KB",
            "--workers", "1")
    return root / "shards"


@pytest.fixture(scope="module")
def text_shards(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("text")
    rng = np.random.default_rng(0)
    words = ["alpha", "beta", "gamma", "delta", "pi", "omega", "x"]
    lines = [" ".join(rng.choice(words, size=max(1, int(n))))
             for n in rng.lognormal(2.5, 0.9, size=300).clip(1, 150)]
    (root / "a.txt").write_text("\n".join(lines) + "\n")
    convert("text", root / "a.txt", root / "shards", "--tokenizer", "bytes", "--append-eos",
            "--shard-size", "8KB")
    return root / "shards"


def _uploaded(local: Path, bucket: str, prefix: str = "ds") -> str:
    url = f"{bucket}/{prefix}"
    upload_directory(local, url)
    return url


def _image_batches(path: object, **kwargs: object) -> list[tuple[list[int], torch.Tensor]]:
    with dp.Loader(path, batch_size=8, transform=CROP, seed=3, **kwargs) as loader:
        return [(b["index"].tolist(), b["image"].clone()) for b in loader]


def _same(a: list, b: list) -> bool:
    return len(a) == len(b) and all(x[0] == y[0] and torch.equal(x[1], y[1])
                                    for x, y in zip(a, b, strict=True))


def _cached_shards(cache: Path) -> dict[str, tuple[int, int]]:
    """Cached shard name -> (inode, size)."""
    return {p.name: (p.stat().st_ino, p.stat().st_size)
            for p in (cache / "shards").glob("*/shard-*") if not p.name.endswith(".part")}


@pytest.mark.parametrize("workers", [0, 2])
def test_loader_reads_s3_as_it_reads_a_folder(image_shards: Path, s3_bucket: str,
                                              workers: int) -> None:
    url = _uploaded(image_shards, s3_bucket)
    local = _image_batches(image_shards, num_workers=workers)
    remote = _image_batches(url, num_workers=workers)
    assert _same(local, remote)
    assert sum(len(i) for i, _ in remote) == 60


@pytest.mark.parametrize("workers", [0, 2])
def test_token_loader_reads_s3_as_it_reads_a_folder(text_shards: Path, s3_bucket: str,
                                                    workers: int) -> None:
    url = _uploaded(text_shards, s3_bucket)

    def batches(path: object) -> list[tuple[list[int], torch.Tensor]]:
        with dp.TokenLoader(path, max_tokens=512, num_workers=workers, seed=1) as loader:
            return [(b["index"].tolist(), b["input_ids"].clone()) for b in loader]

    assert _same(batches(text_shards), batches(url))


@pytest.mark.parametrize("backend", ["arrow", "fsspec"])
def test_msgpack_datasets_read_over_s3_as_from_a_folder(tmp_path: Path, s3_bucket: str,
                                                        monkeypatch: pytest.MonkeyPatch,
                                                        backend: str) -> None:
    """Their scalars come from the msgpack footer, read with range requests."""
    monkeypatch.setenv("DATAPIPE_REMOTE_BACKEND", backend)
    src = make_image_folder(tmp_path / "src", classes=2, per_class=4)
    convert("images", src, tmp_path / "images", "--short-side", "48", "--shard-size", "20KB",
            "--format", "msgpack", "--workers", "1")
    (tmp_path / "a.txt").write_text("".join(f"document {i} " + "x " * i + "\n"
                                            for i in range(50)))
    convert("text", tmp_path / "a.txt", tmp_path / "text", "--tokenizer", "bytes",
            "--shard-size", "1KB", "--format", "msgpack")
    assert _same(_image_batches(tmp_path / "images", num_workers=0),
                 _image_batches(_uploaded(tmp_path / "images", s3_bucket, "images"),
                                num_workers=0))

    def batches(path: object) -> list[tuple[list[int], torch.Tensor]]:
        with dp.TokenLoader(path, max_tokens=128, num_workers=0, seed=1) as loader:
            return [(b["index"].tolist(), b["input_ids"].clone()) for b in loader]

    assert _same(batches(tmp_path / "text"),
                 batches(_uploaded(tmp_path / "text", s3_bucket, "text")))


def test_a_urls_scalar_columns_are_mapped_from_the_cache_without_a_shard(
        image_shards: Path, s3_bucket: str, tmp_path: Path) -> None:
    """Labels and sizes of a URL dataset are read with range requests once per node, into one
    file per column in the cache's index folder (in the column's own dtype), which every
    process then maps: no shard is downloaded for them, nothing is copied per process."""
    url = _uploaded(image_shards, s3_bucket)
    names = ("label", "height", "width")
    with Dataset(image_shards) as local:
        stored = {name: local.scalar(name) for name in names}
    seen = []
    for _ in range(2):
        with Dataset(url) as ds:
            columns = {name: ds.scalar_map(name) for name in names}
        for name, column in columns.items():
            assert Path(mapped_file(column)).parent == tmp_path / "cache" / "index"
            assert column.dtype == stored[name].dtype
            np.testing.assert_array_equal(column, stored[name])
        seen.append({name: (mapped_file(column), Path(mapped_file(column)).stat().st_ino)
                     for name, column in columns.items()})
    assert seen[0] == seen[1], "built once, then mapped"
    assert not _cached_shards(tmp_path / "cache")


def test_cold_then_warm_cache(image_shards: Path, s3_bucket: str, tmp_path: Path) -> None:
    url = _uploaded(image_shards, s3_bucket)
    cache = tmp_path / "cache"
    assert not _cached_shards(cache)
    cold = _image_batches(url, num_workers=2)
    downloaded = _cached_shards(cache)
    manifest = json.loads((image_shards / "manifest.json").read_text())
    assert sorted(downloaded) == sorted(s["name"] for s in manifest["shards"])
    warm = _image_batches(url, num_workers=2)
    assert _same(cold, warm)
    assert _cached_shards(cache) == downloaded  # the same files: nothing downloaded again
    assert not list(cache.rglob("*.part"))


@pytest.mark.parametrize("shuffle", [False, True])
def test_a_cache_smaller_than_an_epoch_is_slower_never_wrong(image_shards: Path,
                                                             s3_bucket: str, tmp_path: Path,
                                                             shuffle: bool) -> None:
    url = _uploaded(image_shards, s3_bucket)
    largest = max(p.stat().st_size for p in image_shards.glob("shard-*"))
    limit = int(2.5 * largest)  # the dataset is about 10 shards
    local = _image_batches(image_shards, num_workers=2, shuffle=shuffle)
    for _ in range(2):  # two epochs, each evicting what the other needs
        remote = _image_batches(url, num_workers=2, shuffle=shuffle, cache_size=limit)
        assert _same(local, remote)
    assert sum(size for _, size in _cached_shards(tmp_path / "cache").values()) <= limit


def test_prefetcher_downloads_the_shards_of_coming_batches(image_shards: Path, s3_bucket: str,
                                                           tmp_path: Path) -> None:
    url = _uploaded(image_shards, s3_bucket)
    manifest = json.loads((image_shards / "manifest.json").read_text())
    last = manifest["shards"][-1]["name"]
    with dp.Loader(url, batch_size=4, transform=CROP, shuffle=False, num_workers=0) as loader:
        iterator = iter(loader)
        next(iterator)  # reads only the first shard or two, in this process
        deadline = time.monotonic() + 20
        while last not in _cached_shards(tmp_path / "cache") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert last in _cached_shards(tmp_path / "cache")  # the plan's last shard, ahead
        assert len(list(iterator)) == len(loader) - 1


def test_a_mixtures_remote_source_is_prefetched(image_shards: Path, s3_bucket: str,
                                                tmp_path: Path) -> None:
    """A mixture of a local and a remote dataset: the remote source's shards of the coming
    batches download ahead, as for one remote dataset."""
    url = _uploaded(image_shards, s3_bucket)
    manifest = json.loads((image_shards / "manifest.json").read_text())
    last = manifest["shards"][-1]["name"]
    with dp.Loader({"local": image_shards, "remote": url}, weights=[1, 1], batch_size=4,
                   transform=CROP, shuffle=False, num_workers=0) as loader:
        iterator = iter(loader)
        next(iterator)
        assert last in _wait_until_cached(tmp_path / "cache", {last})
        assert len(loader._prefetcher.prefetchers) == 1  # the local source needs none
        assert len(list(iterator)) == len(loader) - 1


def _wait_until_cached(cache: Path, names: set[str], seconds: float = 20) -> set[str]:
    """The shards of `names` in the cache, once all are there or `seconds` have passed."""
    deadline = time.monotonic() + seconds
    while not names <= set(_cached_shards(cache)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return names & set(_cached_shards(cache))


def test_a_state_from_another_world_size_restarts_the_prefetcher_on_the_new_plan(
        image_shards: Path, s3_bucket: str, tmp_path: Path) -> None:
    """The prefetch process plans with the position it was forked with: a state saved at
    another world size starts a new one on what is left of the epoch, and so does a whole pass
    over that epoch afterwards; the epoch after the resumed one, planned alike, does not."""
    url = _uploaded(image_shards, s3_bucket)
    manifest = json.loads((image_shards / "manifest.json").read_text())
    ends = np.cumsum([s["rows"] for s in manifest["shards"]])
    largest = max(p.stat().st_size for p in image_shards.glob("shard-*"))
    settings = dict(batch_size=4, transform=CROP, shuffle=False, num_workers=0)
    with dp.Loader(image_shards, rank=0, world_size=2, **settings) as saved:
        batches = iter(saved)
        for _ in range(6):  # the two ranks drew samples 0-47 of 60
            next(batches)
        state = saved.state_dict()
    rest = {manifest["shards"][k]["name"]
            for k in np.unique(np.searchsorted(ends, np.arange(48, 60), side="right"))}
    # Its upcoming shards may fill half the cache: two or three shards, never the whole epoch.
    with dp.Loader(url, rank=0, world_size=1, cache_size=5 * largest, **settings) as loader:

        def prefetcher() -> int:
            return loader._prefetcher.prefetchers[0]._process.pid

        next(iter(loader))
        whole = prefetcher()
        loader.load_state_dict(state)
        resumed = iter(loader)
        assert next(resumed)["index"].tolist() == [48, 49, 50, 51]  # read in this process
        restarted = prefetcher()
        assert restarted != whole
        # Only the prefetcher reads beyond batch 0 yet: the rest of the epoch's shards.
        assert _wait_until_cached(tmp_path / "cache", rest) == rest
        assert [b["index"].tolist() for b in resumed] == [[52, 53, 54, 55], [56, 57, 58, 59]]
        assert len(list(loader)) == 15  # epoch 1: no lineage, in either process
        assert prefetcher() == restarted
        loader.set_epoch(0)  # a whole epoch 0, which the forked copy plans as the resumed one
        next(iter(loader))
        assert prefetcher() != restarted


def test_a_corrupt_object_is_fetched_twice_then_named(image_shards: Path, s3_bucket: str,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    url = _uploaded(image_shards, s3_bucket)
    name = "shard-00003.arrow"
    data = bytearray(get_object(f"{url}/{name}"))
    data[len(data) // 2] ^= 0x10  # same size, other bytes: only the hash can tell
    put_object(f"{url}/{name}", bytes(data))
    from datapipe.format.remote import RemoteDirectory

    streams: list[str] = []
    stream = RemoteDirectory.stream
    monkeypatch.setattr(RemoteDirectory, "stream",
                        lambda self, n: (streams.append(n), stream(self, n))[1])
    with pytest.raises(dp.DataError) as caught:
        _image_batches(url, num_workers=0, shuffle=False)
    message = str(caught.value)
    assert f"{url}/{name}" in message and "hash" in message and "\n" not in message
    assert streams.count(name) == 2
    assert not list((Path(CacheSettings.resolve().directory) / "shards").glob(f"*/{name}*"))


def test_a_damaged_cached_copy_is_fetched_again(image_shards: Path, s3_bucket: str,
                                                tmp_path: Path) -> None:
    url = _uploaded(image_shards, s3_bucket)
    first = _image_batches(url, num_workers=0)
    copy = next((tmp_path / "cache" / "shards").glob("*/shard-00002.arrow"))
    data = bytearray(copy.read_bytes())
    data[-40] ^= 0xFF  # in the Arrow footer: the structure check fails
    copy.write_bytes(bytes(data))
    assert _same(first, _image_batches(url, num_workers=0))
    assert next((tmp_path / "cache" / "shards").glob("*/shard-00002.arrow")).read_bytes() == \
        (image_shards / "shard-00002.arrow").read_bytes()


_SHARED_CACHE_READER = textwrap.dedent("""
    import hashlib, json, sys
    import datapipe as dp
    url, out = sys.argv[1], sys.argv[2]
    digests = []
    with dp.Loader(url, batch_size=8, transform=dp.image.CenterCrop(32), seed=3,
                   num_workers=1, cache_size=int(sys.argv[3])) as loader:
        for epoch in range(3):
            loader.set_epoch(epoch)
            for b in loader:
                digests.append([b["index"].tolist(),
                                hashlib.sha256(b["image"].contiguous().numpy()).hexdigest()])
    open(out, "w").write(json.dumps(digests))
""")


def test_two_processes_share_one_small_cache(image_shards: Path, s3_bucket: str,
                                             tmp_path: Path) -> None:
    url = _uploaded(image_shards, s3_bucket)
    largest = max(p.stat().st_size for p in image_shards.glob("shard-*"))
    limit = 4 * largest  # smaller than the dataset: both evict while the other reads
    outs = [tmp_path / f"run{i}.json" for i in range(2)]
    procs = [subprocess.Popen([sys.executable, "-c", _SHARED_CACHE_READER, url, str(out),
                               str(limit)], stderr=subprocess.PIPE, text=True) for out in outs]
    for proc in procs:
        _, err = proc.communicate(timeout=240)
        assert proc.returncode == 0, err
    runs = [json.loads(out.read_text()) for out in outs]
    assert runs[0] == runs[1]
    import hashlib

    expected = []
    with dp.Loader(image_shards, batch_size=8, transform=CROP, seed=3, num_workers=0) as loader:
        for epoch in range(3):
            loader.set_epoch(epoch)
            expected += [[b["index"].tolist(),
                          hashlib.sha256(b["image"].contiguous().numpy()).hexdigest()]
                         for b in loader]
    assert runs[0] == expected
    cache = tmp_path / "cache"
    assert sum(size for _, size in _cached_shards(cache).values()) <= limit
    for copy in (cache / "shards").glob("*/shard-*"):
        assert copy.read_bytes() == (image_shards / copy.name).read_bytes()


def test_cli_inspect_verify_bench_on_a_url(image_shards: Path, s3_bucket: str, cli) -> None:
    url = _uploaded(image_shards, s3_bucket)
    local = cli("inspect", image_shards, "--json")
    remote = cli("inspect", url, "--json")
    assert remote.code == 0, remote.err
    summary = json.loads(remote.out)
    assert summary["path"] == url
    assert {k: v for k, v in summary.items() if k != "path"} == \
        {k: v for k, v in json.loads(local.out).items() if k != "path"}
    result = cli("verify", url)
    assert result.code == 0 and "shards intact" in result.out, result.err
    result = cli("bench", url, "--batch-size", "8", "--workers", "1", "--crop", "32",
                 "--epochs", "1")
    assert result.code == 0 and "samples/s" in result.out, result.err

    put_object(f"{url}/shard-00001.arrow", b"not a shard")
    result = cli("verify", url)
    assert result.code == 1
    assert f"{url}/shard-00001.arrow: size 11 bytes" in result.err

    result = cli("inspect", f"{s3_bucket}/nothing-here")
    assert result.code == 1
    assert result.err.count("\n") == 1 and "manifest.json: missing" in result.err


def test_convert_to_a_url_uploads_the_same_dataset(tmp_path: Path, s3_bucket: str,
                                                   cli) -> None:
    src = make_image_folder(tmp_path / "src", classes=2, per_class=10)
    (src / "class_0" / "broken.jpg").write_bytes(b"not an image")
    args = ["--short-side", "48", "--shard-size", "20KB", "--workers", "1"]
    convert("images", src, tmp_path / "local", *args)
    url = f"{s3_bucket}/converted"
    result = cli("convert", "images", src, url, *args)
    assert result.code == 0, result.err
    assert f"{url}/rejects.jsonl" in result.out
    names = sorted(p.name for p in (tmp_path / "local").iterdir()
                   if not p.name.startswith("."))
    assert list_keys(url) == names
    for name in names:
        assert get_object(f"{url}/{name}") == (tmp_path / "local" / name).read_bytes(), name
    staging = Path(CacheSettings.resolve().directory) / "staging"
    assert not any(staging.iterdir())  # uploaded, then removed
    assert cli("convert", "images", src, url, *args).code == 2  # a finished dataset
    assert cli("verify", url).code == 0


def test_a_killed_upload_resumes(tmp_path: Path, s3_bucket: str, cli,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from datapipe.format.remote import RemoteDirectory

    src = make_image_folder(tmp_path / "src", classes=2, per_class=10)
    args = ["--short-side", "48", "--shard-size", "20KB", "--workers", "1"]
    convert("images", src, tmp_path / "local", *args)
    url = f"{s3_bucket}/converted"
    sent: list[str] = []
    upload = RemoteDirectory.upload

    def fails_after_three(self: RemoteDirectory, source: Path, name: str) -> None:
        if len(sent) == 3:
            raise dp.DataError(f"{self.where(name)}: cannot write (connection reset)")
        sent.append(name)
        upload(self, source, name)

    monkeypatch.setattr(RemoteDirectory, "upload", fails_after_three)
    first = cli("convert", "images", src, url, *args)
    assert first.code == 1 and "connection reset" in first.err
    assert "manifest.json" not in list_keys(url)  # not a dataset yet
    monkeypatch.setattr(RemoteDirectory, "upload",
                        lambda self, source, name: (sent.append(name),
                                                    upload(self, source, name))[1])
    second = cli("convert", "images", src, url, *args)
    assert second.code == 0, second.err
    assert "kept from the interrupted run" in second.out
    shards = sorted(p.name for p in (tmp_path / "local").glob("shard-*"))
    assert sorted(n for n in sent if n.startswith("shard-")) == shards  # each sent once
    for name in [*shards, "manifest.json", "rejects.jsonl"]:
        assert get_object(f"{url}/{name}") == (tmp_path / "local" / name).read_bytes(), name


def test_closing_a_loader_brings_the_cache_back_under_its_limit(
        image_shards: Path, s3_bucket: str, tmp_path: Path) -> None:
    """Workers and the prefetcher end without releasing their shards one by one, so what the
    shards they held pushed past the limit stays unless the loader's close evicts down to it.
    Here the excess is put there between start and close, where no process of the loader
    evicts, so only close can bring the cache back under its limit."""
    url = _uploaded(image_shards, s3_bucket)
    largest = max(p.stat().st_size for p in image_shards.glob("shard-*"))
    limit = int(2.5 * largest)
    _image_batches(url, num_workers=2, cache_size=limit)
    loader = dp.Loader(url, batch_size=8, transform=CROP, num_workers=2, cache_size=limit)
    stale = tmp_path / "cache" / "shards" / ("0" * 16) / "shard-00000.arrow"
    stale.parent.mkdir(parents=True)
    stale.write_bytes(b"x" * limit)
    assert sum(size for _, size in _cached_shards(tmp_path / "cache").values()) > limit
    loader.close()
    assert sum(size for _, size in _cached_shards(tmp_path / "cache").values()) <= limit
