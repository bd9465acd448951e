"""The node-local shard cache on its own: atomic downloads, locks that die with their holder,
LRU eviction that never deletes a shard in use, settings from arguments and environment."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from datapipe.errors import ArgumentError, DataError
from datapipe.format.cache import CacheSettings, CorruptDownload, ShardCache
from datapipe.format.hashing import hash_bytes

DATA = os.urandom(300_000)
HASH = hash_bytes(DATA)


def _chunks(data: bytes = DATA, size: int = 65536) -> Iterator[bytes]:
    for i in range(0, len(data), size):
        yield data[i:i + size]


def _fetch(cache: ShardCache, key: str, data: bytes = DATA, chunks=None) -> Path:
    pinned = cache.fetch(key, "shard-00000.arrow", len(data), hash_bytes(data), f"s3://b/{key}",
                         chunks or (lambda: _chunks(data)))
    pinned.release()
    return pinned.path


def test_a_download_is_hashed_and_renamed_into_place(tmp_path: Path) -> None:
    cache = ShardCache(CacheSettings(tmp_path, 1 << 30))
    path = _fetch(cache, "k")
    assert path.read_bytes() == DATA
    assert [p.name for p in path.parent.iterdir() if p.name != ".lock"] == [path.name]


def test_a_failure_mid_stream_leaves_nothing(tmp_path: Path) -> None:
    cache = ShardCache(CacheSettings(tmp_path, 1 << 30))

    def broken() -> Iterator[bytes]:
        yield DATA[:65536]
        raise OSError("connection reset")

    with pytest.raises(OSError):
        _fetch(cache, "k", chunks=broken)
    assert not [p for p in (tmp_path / "shards" / "k").iterdir() if p.name != ".lock"]
    assert _fetch(cache, "k").read_bytes() == DATA


def test_bytes_that_do_not_hash_as_expected_are_refused(tmp_path: Path) -> None:
    cache = ShardCache(CacheSettings(tmp_path, 1 << 30))
    wrong = DATA[:-1] + bytes([DATA[-1] ^ 1])
    with pytest.raises(CorruptDownload, match=r"s3://b/k: content hash differs"):
        cache.fetch("k", "shard-00000.arrow", len(DATA), HASH, "s3://b/k",
                    lambda: _chunks(wrong))
    assert not cache.path("k", "shard-00000.arrow").exists()
    assert not list((tmp_path / "shards" / "k").glob("*.part"))


@pytest.mark.parametrize(("key", "name"), [("k", "../../outside"), ("../..", "outside"),
                                           ("k", "ABSOLUTE"), ("k/../..", "outside")])
def test_a_path_that_leaves_the_cache_is_refused_before_any_write(tmp_path: Path, key: str,
                                                                  name: str) -> None:
    """The defence behind the manifest's name checks, which keep such names from getting
    here: whatever the key and name, nothing is written outside the cache."""
    name = str(tmp_path / "outside") if name == "ABSOLUTE" else name
    root = tmp_path / "cache"
    cache = ShardCache(CacheSettings(root, 1 << 30))
    with pytest.raises(DataError, match="resolves outside"):
        cache.fetch(key, name, len(DATA), HASH, "s3://b/k", _chunks)
    assert not [p for p in tmp_path.rglob("*") if p != root and root not in p.parents]


def test_a_link_planted_in_the_cache_is_not_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim").write_bytes(b"not a shard")
    cache = ShardCache(CacheSettings(tmp_path / "cache", 1 << 30))
    (tmp_path / "cache" / "shards" / "j").mkdir(parents=True)
    (tmp_path / "cache" / "shards" / "k").symlink_to(outside)
    with pytest.raises(DataError, match="resolves outside"):
        _fetch(cache, "k")
    (tmp_path / "cache" / "shards" / "j" / "shard-00000.arrow").symlink_to(outside / "victim")
    with pytest.raises(DataError, match="resolves outside"):  # not read as the cached copy
        _fetch(cache, "j")
    assert [p.name for p in outside.iterdir()] == ["victim"]
    assert (outside / "victim").read_bytes() == b"not a shard"
    assert CacheSettings(tmp_path / "cache", 1).staging("0" * 16).parent.name == "staging"
    with pytest.raises(DataError, match="resolves outside"):
        CacheSettings(tmp_path / "cache", 1).staging("../../x")


_SLOW_DOWNLOAD = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from datapipe.format.cache import CacheSettings, ShardCache
    from datapipe.format.hashing import hash_bytes
    data = bytes(range(256)) * 4096
    def slow():
        yield data[:65536]
        time.sleep(60)  # killed here
        yield data[65536:]
    ShardCache(CacheSettings(Path(sys.argv[1]), 1 << 30)).fetch(
        "k", "shard-00000.arrow", len(data), hash_bytes(data), "s3://b/k", slow)
""")


def test_a_killed_download_leaves_no_shard_and_its_lock_dies_with_it(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", _SLOW_DOWNLOAD, str(tmp_path)])
    part = tmp_path / "shards" / "k" / "shard-00000.arrow.part"
    deadline = time.monotonic() + 30
    while not (part.exists() and part.stat().st_size) and time.monotonic() < deadline:
        time.sleep(0.02)
    try:
        assert part.exists(), "the download never started"
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    cache = ShardCache(CacheSettings(tmp_path, 1 << 30))
    assert not cache.path("k", "shard-00000.arrow").exists()
    data = bytes(range(256)) * 4096
    started = time.monotonic()
    assert _fetch(cache, "k", data).read_bytes() == data  # the lock was released by the kill
    assert time.monotonic() - started < 20
    assert not part.exists()


def test_eviction_is_least_recently_used_and_spares_shards_in_use(tmp_path: Path) -> None:
    cache = ShardCache(CacheSettings(tmp_path, 2 * len(DATA)))  # room for two
    in_use = cache.fetch("a", "shard-00000.arrow", len(DATA), HASH, "a", _chunks)
    for key in ("b", "c", "d"):
        _fetch(cache, key)
    cached = {p.parent.name for p in (tmp_path / "shards").glob("*/shard-*")}
    assert cached == {"a", "d"}  # a is in use; b and c were older than d
    assert in_use.path.read_bytes() == DATA
    in_use.release()
    os.utime(cache.path("d", "shard-00000.arrow"), ns=(time.time_ns(), time.time_ns()))
    _fetch(cache, "e")
    assert {p.parent.name for p in (tmp_path / "shards").glob("*/shard-*")} == {"d", "e"}


def test_a_forked_child_does_not_hold_its_parents_pins(tmp_path: Path) -> None:
    cache = ShardCache(CacheSettings(tmp_path, len(DATA)))
    pinned = cache.fetch("a", "shard-00000.arrow", len(DATA), HASH, "a", _chunks)
    read, write = os.pipe()
    ready_read, ready_write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child keeps running while the parent releases and evicts
        os.close(write)
        os.write(ready_write, b"x")  # fork handlers have run by now
        os.read(read, 1)
        os._exit(0)
    try:
        os.read(ready_read, 1)
        pinned.release()
        _fetch(cache, "b")
        assert not cache.path("a", "shard-00000.arrow").exists()
    finally:
        for fd in (read, write, ready_read, ready_write):
            os.close(fd)
        os.waitpid(pid, 0)


def test_settings_come_from_arguments_then_environment(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DATAPIPE_CACHE_DIR", raising=False)
    monkeypatch.delenv("DATAPIPE_CACHE_SIZE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    default = CacheSettings.resolve()
    assert default.directory == tmp_path / "xdg" / "datapipe"
    assert default.limit == 100 << 30
    monkeypatch.setenv("DATAPIPE_CACHE_DIR", str(tmp_path / "env"))
    monkeypatch.setenv("DATAPIPE_CACHE_SIZE", "2GB")
    assert CacheSettings.resolve() == CacheSettings(tmp_path / "env", 2 << 30)
    assert CacheSettings.resolve(tmp_path / "arg", "512MB") == \
        CacheSettings(tmp_path / "arg", 512 << 20)
    with pytest.raises(ArgumentError, match="cache size: cannot read 'lots'"):
        CacheSettings.resolve(size="lots")


def test_a_cache_pushed_over_by_shards_in_use_shrinks_when_they_are_released(
        tmp_path: Path) -> None:
    cache = ShardCache(CacheSettings(tmp_path, len(DATA)))  # room for one
    in_use = [cache.fetch(key, "shard-00000.arrow", len(DATA), HASH, key, _chunks)
              for key in ("a", "b")]
    assert {p.parent.name for p in (tmp_path / "shards").glob("*/shard-*")} == {"a", "b"}
    in_use[0].release()
    assert {p.parent.name for p in (tmp_path / "shards").glob("*/shard-*")} == {"b"}
    in_use[1].release()
    assert {p.parent.name for p in (tmp_path / "shards").glob("*/shard-*")} == {"b"}
