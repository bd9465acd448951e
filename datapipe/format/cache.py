"""The node-local shard cache: remote shards land here, shared by every process on the node.

    CACHE/shards/<hash>/<shard name>   a complete shard whose bytes hash to <hash>, checked as
                                       it streamed in; named by content, so a reconverted
                                       dataset never meets a stale copy
    CACHE/shards/<hash>/.lock          flock, held exclusively while that shard downloads
    CACHE/shards/<hash>/<name>.part    the download in progress: fsynced, then renamed
    CACHE/.evict.lock                  flock: one process evicts at a time
    CACHE/index/                       small derived files (scalar columns), by manifest hash
    CACHE/staging/                     `datapipe convert` to a URL writes here, then uploads

Every lock is a flock, which the kernel drops when its holder dies: a crash leaves nothing
stale, and the part file of a killed download is removed by the next process that takes its
lock. A process using a shard holds a shared flock on the file; eviction takes an exclusive one
without waiting and skips the file when it cannot, so a shard in use is never deleted (Linux
would keep a mapping of a deleted file valid, but its space would not come back, and the cache
would overshoot its limit unseen). Least recently used goes first: by atime, which datapipe sets
whenever a process opens a shard. Shards in use may take the cache past its limit, until they
are released; nothing else.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from datapipe import sizes
from datapipe.errors import ArgumentError, DataError, DatapipeError
from datapipe.format.hashing import StreamHash
from datapipe.format.names import inside
from datapipe.system import same_file

CACHE_DIR_ENV = "DATAPIPE_CACHE_DIR"
CACHE_SIZE_ENV = "DATAPIPE_CACHE_SIZE"
DEFAULT_CACHE_SIZE = 100 << 30
_LOCK = ".lock"
_PART = ".part"

# Descriptors this process holds locks with. A forked child closes its copies at once: a flock
# belongs to the open file, so a child that kept them would pin shards (or block downloads) for
# as long as it lives, and would close them under its parent's feet.
_HELD: set[int] = set()


def _close_inherited() -> None:
    for fd in _HELD:
        with contextlib.suppress(OSError):
            os.close(fd)
    _HELD.clear()


os.register_at_fork(after_in_child=_close_inherited)


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "datapipe"


@dataclass(frozen=True)
class CacheSettings:
    """Where remote shards are cached on this node, and how many bytes they may take."""

    directory: Path
    limit: int

    @classmethod
    def resolve(cls, directory: str | Path | None = None,
                size: int | str | None = None) -> CacheSettings:
        """An argument wins, then DATAPIPE_CACHE_DIR / DATAPIPE_CACHE_SIZE, then the defaults
        ($XDG_CACHE_HOME or ~/.cache, then /datapipe; 100 GB)."""
        directory = directory or os.environ.get(CACHE_DIR_ENV) or default_cache_dir()
        size = size if size is not None else os.environ.get(CACHE_SIZE_ENV)
        if size is None:
            limit = DEFAULT_CACHE_SIZE
        elif isinstance(size, int) and not isinstance(size, bool):
            if size < 1:
                raise ArgumentError(f"cache_size must be >= 1 byte, got {size}")
            limit = size
        else:
            limit = sizes.parse_size(size, "cache size", 1 << 60, "1 EB")
        return cls(Path(directory).expanduser().absolute(), limit)

    def staging(self, key: str) -> Path:
        """The folder a conversion to a URL writes in first (CACHE/staging/<key>)."""
        return inside(self.directory, self.directory / "staging" / key)


def _flock(path: Path, mode: int, create: bool) -> int | None:
    """A descriptor holding `mode` on the file now at `path`; None when the file is absent
    (create=False) or the lock is taken and `mode` has LOCK_NB. A file removed or replaced
    while we waited is not the one we want: try again."""
    while True:
        try:
            flags = (os.O_RDWR | os.O_CREAT) if create else os.O_RDONLY
            fd = os.open(path, flags | os.O_CLOEXEC, 0o644)
        except FileNotFoundError:
            if not create:
                return None
            path.parent.mkdir(parents=True, exist_ok=True)
            continue
        try:
            fcntl.flock(fd, mode)
        except BlockingIOError:
            os.close(fd)
            return None
        if same_file(fd, path):
            _HELD.add(fd)
            return fd
        os.close(fd)
        if not create:
            return None


def _unlock(fd: int) -> None:
    _HELD.discard(fd)
    os.close(fd)


@contextlib.contextmanager
def exclusive_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive flock on `path` (created if absent) for the block."""
    fd = _flock(path, fcntl.LOCK_EX, create=True)
    try:
        yield
    finally:
        _unlock(fd)


class PinnedFile:
    """A cached file held in use (a shared flock): eviction leaves it alone until released."""

    def __init__(self, path: Path, fd: int, on_release: Callable[[], None]) -> None:
        self.path = path
        self._fd: int | None = fd
        self._pid = os.getpid()
        self._on_release = on_release

    def release(self) -> None:
        # In a forked child the descriptor was closed at the fork: it is the parent's to close.
        if self._fd is not None and self._pid == os.getpid():
            _unlock(self._fd)
            self._on_release()
        self._fd = None


class CorruptDownload(DataError):
    """The bytes that arrived do not hash as the manifest says."""


class ShardCache:
    def __init__(self, settings: CacheSettings) -> None:
        self.settings = settings
        self.shards = settings.directory / "shards"
        self.index_directory = settings.directory / "index"

    def path(self, key: str, name: str) -> Path:
        return inside(self.shards, self.shards / key / name)

    def has(self, key: str, name: str) -> bool:
        """Whether a copy is there. It only looks, so it skips path()'s check (tens of
        microseconds, and the prefetcher asks for every coming shard each time it polls)."""
        return (self.shards / key / name).exists()

    def entry(self, key: str) -> Path:
        """The folder of one shard's copy, its lock and its download in progress."""
        return inside(self.shards, self.shards / key)

    def index_file(self, name: str) -> Path:
        return inside(self.index_directory, self.index_directory / name)

    def pin(self, key: str, name: str) -> PinnedFile | None:
        """The cached file, held in use; None when it is not in the cache."""
        path = self.path(key, name)
        fd = _flock(path, fcntl.LOCK_SH, create=False)
        if fd is None:
            return None
        with contextlib.suppress(OSError):  # the LRU clock; a read-only cache still works
            os.utime(fd, ns=(time.time_ns(), os.fstat(fd).st_mtime_ns))
        # Once released, the cache is brought back under its limit if shards in use had
        # pushed it over.
        return PinnedFile(path, fd, on_release=lambda: self.make_room(0))

    def fetch(self, key: str, name: str, size: int, expected_hash: str, where: str,
              chunks: Callable[[], Iterator[bytes]]) -> PinnedFile:
        """The cached file, downloaded from `chunks()` first if absent (by one process: the
        others wait for it). Raises CorruptDownload when the bytes do not hash as expected."""
        while True:
            pinned = self.pin(key, name)
            if pinned is not None:
                return pinned
            entry = self.entry(key)
            with self._writing(where), exclusive_lock(entry / _LOCK):
                pinned = self.pin(key, name)
                if pinned is None:
                    _remove_parts(entry)  # a download killed before ours
                    self.make_room(size)
                    self._download(entry, name, expected_hash, where, chunks)
                    pinned = self.pin(key, name)  # before the lock goes: no eviction between
            if pinned is not None:
                return pinned

    def _download(self, entry: Path, name: str, expected_hash: str, where: str,
                  chunks: Callable[[], Iterator[bytes]]) -> None:
        part = inside(self.shards, entry / (name + _PART))
        digest = StreamHash()
        try:
            with open(part, "wb") as f:
                for chunk in chunks():
                    digest.update(chunk)
                    f.write(chunk)
                f.flush()
                os.fsync(f.fileno())
            if digest.hexdigest() != expected_hash:
                raise CorruptDownload(f"{where}: content hash differs from the manifest "
                                      f"({digest.hexdigest()}, manifest says {expected_hash})")
            os.replace(part, entry / name)
        except BaseException:
            part.unlink(missing_ok=True)
            raise

    def discard(self, key: str, name: str) -> None:
        """Remove a cached copy found damaged (a process mapping it keeps its mapping)."""
        with exclusive_lock(self.entry(key) / _LOCK):
            self.path(key, name).unlink(missing_ok=True)

    def make_room(self, incoming: int) -> None:
        """Evict least recently used shards not in use until `incoming` more bytes fit."""
        with exclusive_lock(self.settings.directory / ".evict.lock"):
            files = _cached_files(self.shards)
            total = sum(size for _, _, size in files)
            for path, _, size in sorted(files, key=lambda f: f[1]):
                if total + incoming <= self.settings.limit:
                    break
                if _evict(path):
                    total -= size

    @contextlib.contextmanager
    def _writing(self, where: str) -> Iterator[None]:
        try:
            yield
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise DatapipeError(f"{where}: no space left in the shard cache "
                                    f"{self.settings.directory}; free some or give a smaller "
                                    f"cache size ({CACHE_SIZE_ENV})") from None
            if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
                raise ArgumentError(f"shard cache {self.settings.directory} is not writable: "
                                    f"{exc.strerror}; give another ({CACHE_DIR_ENV})") from None
            raise


def _cached_files(shards: Path) -> list[tuple[Path, int, int]]:
    """(path, atime, size) of every shard and part file in the cache."""
    files = []
    with contextlib.suppress(FileNotFoundError):
        for entry in os.scandir(shards):
            with contextlib.suppress(FileNotFoundError, NotADirectoryError):
                for item in os.scandir(entry.path):
                    if item.name != _LOCK:
                        with contextlib.suppress(FileNotFoundError):
                            st = item.stat()
                            files.append((Path(item.path), st.st_atime_ns, st.st_size))
    return files


def _evict(path: Path) -> bool:
    """Delete a cached file nobody uses (a part file: one nobody downloads); True if done."""
    if path.name.endswith(_PART):
        lock = _flock(path.parent / _LOCK, fcntl.LOCK_EX | fcntl.LOCK_NB, create=True)
        if lock is None:
            return False  # downloading now
        try:
            path.unlink(missing_ok=True)
        finally:
            _unlock(lock)
        return True
    fd = _flock(path, fcntl.LOCK_EX | fcntl.LOCK_NB, create=False)
    if fd is None:
        return False  # in use, or gone already
    try:
        path.unlink(missing_ok=True)
    finally:
        _unlock(fd)
    return True


def _remove_parts(entry: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        for item in entry.iterdir():
            if item.name.endswith(_PART):
                item.unlink(missing_ok=True)
