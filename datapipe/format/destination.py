"""Where a dataset is written: a local folder, or a URL whose files are made in a local staging
folder first and uploaded with the manifest last (upload.py).

Every writer of datasets goes through here, `datapipe convert` and DatasetWriter alike, so each
gets the same guarantees: one writer at a time (the folder's lock), a folder holding files
datapipe did not write refused, a finished dataset replaced only when asked, the manifest
written last, and the OS errors of writing as one line the user can act on.
"""

from __future__ import annotations

import contextlib
import errno
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from datapipe.errors import ArgumentError, DatapipeError
from datapipe.format.manifest import MANIFEST_NAME, Manifest, write_atomic
from datapipe.format.output_lock import LOCK_NAME, OutputLock
from datapipe.format.remote import is_url, local_path
from datapipe.format.upload import RemoteTarget, staging_directory

REJECTS_NAME = "rejects.jsonl"
# A conversion in progress (docs/FORMAT.md): `datapipe convert` resumes from it.
JOURNAL_NAME = ".datapipe-convert.jsonl"


@dataclass(frozen=True)
class Wording:
    """How errors name the destination, and what the user can do: a converter's user and a
    library caller act on different settings."""

    label: str  # "OUT": the destination is "OUT /data/out" in errors
    overwrite: str  # the setting that replaces a finished dataset
    holder: str  # what the writer is, for the error a second writer gets
    after_full_disk: str  # what to do once space is freed

    def __post_init__(self) -> None:
        if not all((self.label, self.overwrite, self.holder, self.after_full_disk)):
            raise ArgumentError("every part of a Wording is needed in its errors")


CONVERT_WORDING = Wording("OUT", "--overwrite", "datapipe convert",
                          "rerun the same command: it resumes from the last finished shard")
WRITER_WORDING = Wording("DatasetWriter out", "overwrite=True", "DatasetWriter",
                         "write the dataset again")


def is_ours(name: str) -> bool:
    """A name datapipe writes in a dataset's folder; temporary names too (NAME.tmp): a run
    stopped mid-write leaves them for the next to clear."""
    return name.startswith(("shard-", ".datapipe-", MANIFEST_NAME, REJECTS_NAME))


@contextlib.contextmanager
def writing(where: str, wording: Wording) -> Iterator[None]:
    """OS errors while writing `where` become one-line errors: the user can act on every one."""
    try:
        yield
    except OSError as exc:
        name = f" ({Path(exc.filename).name})" if exc.filename else ""
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise DatapipeError(f"{where}: no space left on the device{name}; free some and "
                                f"{wording.after_full_disk}") from None
        if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            raise ArgumentError(f"{where} is not writable{name}: {exc.strerror}") from None
        if exc.errno in (errno.ENOTDIR, errno.ENAMETOOLONG):  # names no possible folder
            raise ArgumentError(f"{where}: {exc.strerror}") from None
        raise DatapipeError(f"{where}: cannot write{name}: {exc.strerror or exc}") from None


class Destination:
    """A dataset's destination, held (locked) from construction to `finish` or `release`.

    `overwrite` empties it of what `may_clear` names (default: every file of ours), and
    unpublishes a finished dataset there; without it a finished dataset is refused. What else
    of ours it holds (`leftovers`) is for the writer to judge: a conversion to resume, or an
    unfinished write to clear. `shared` holds a local folder's lock shared, for the parts of
    one dataset written side by side (see output_lock.py). For a URL, files go to `staging`
    (default: a folder of the node's cache named after `staging_key`, the URL by default).
    """

    def __init__(self, out: str | Path, wording: Wording, *, overwrite: bool = False,
                 staging: Path | None = None, staging_key: str | None = None,
                 shared: bool = False, may_clear: Callable[[str], bool] = is_ours) -> None:
        self.wording = wording
        self.target: RemoteTarget | None = None
        if is_url(out):
            self.target = RemoteTarget(str(out), is_ours, wording.label, wording.overwrite)
            self.folder = staging_directory(staging_key or self.target.url, staging)
        else:
            self.folder = local_path(out)
        self.where = f"{wording.label} {self.folder}"
        with self.writing():
            if self.folder.exists() and not self.folder.is_dir():
                raise ArgumentError(f"{self.where} exists and is not a directory")
            self.folder.mkdir(parents=True, exist_ok=True)
        # Parts writing to a URL stage apart: each holds its own staging folder alone.
        self.lock = OutputLock(self.folder, self.where, wording.holder,
                               shared and self.target is None)
        try:
            with self.writing():
                self.lock.acquire()
                if self.target is not None:
                    self.target.prepare(overwrite)
                self._prepare(overwrite, may_clear)
        except BaseException:
            self.lock.release()
            raise

    def writing(self) -> contextlib.AbstractContextManager[None]:
        return writing(self.where, self.wording)

    def _prepare(self, overwrite: bool, may_clear: Callable[[str], bool]) -> None:
        names = self.leftovers()
        foreign = sorted(n for n in names if not is_ours(n))
        if foreign:
            raise ArgumentError(f"{self.where} holds files datapipe did not write "
                                f"({foreign[0]}, ...); choose an empty or new directory")
        if overwrite:
            self.remove([n for n in names if may_clear(n)])
        elif MANIFEST_NAME in names:
            raise ArgumentError(f"{self.where} already holds a finished dataset; pass "
                                f"{self.wording.overwrite} to replace it")

    def leftovers(self) -> list[str]:
        """The names in the folder, but its lock."""
        return sorted(p.name for p in self.folder.iterdir() if p.name != LOCK_NAME)

    def remove(self, names: list[str]) -> None:
        for name in names:
            path = self.folder / name
            if path.is_dir():
                shutil.rmtree(path)
            else:  # another part may have removed a name both may clear
                path.unlink(missing_ok=True)

    def publish(self, manifest: Manifest, side_files: list[str], resumed: bool) -> None:
        """Make the written shards a dataset: the manifest saved last, or for a URL the shards
        and `side_files` uploaded, then the manifest. `resumed`: a shard already in the store
        with its size is the one in the staging folder (a resumed conversion's, whose bytes
        do not change) and is not sent again."""
        if self.target is None:
            with self.writing():
                manifest.save(self.folder)
        else:
            self.target.upload(self.folder, manifest, side_files, resumed)

    def publish_side_file(self, name: str, data: bytes, shards: dict[str, int]) -> None:
        """A file that makes no dataset (a part's record), after the shards it lists (names
        and sizes): written atomically, or for a URL uploaded after those shards."""
        with self.writing():
            write_atomic(self.folder / name, data)
        if self.target is not None:
            self.target.send(self.folder, list(shards), [name], shards, resumed=False)

    def finish(self) -> None:
        """The dataset is where it belongs: empty the staging folder of a URL, give the lock
        back, and remove the staging folder."""
        if self.target is not None:
            with self.writing():
                self.remove(self.leftovers())
        self.release()
        if self.target is not None:
            with contextlib.suppress(OSError):
                self.folder.rmdir()

    def abandon(self, names: list[str]) -> None:
        """Give up after a failure: remove `names` (for a URL, the whole staging folder:
        nothing was sent), as far as possible, and give the lock back. The error that caused
        it is the one the user sees, not one of the clean-up."""
        with contextlib.suppress(OSError):
            self.remove(self.leftovers() if self.target is not None else names)
        self.release()
        if self.target is not None:
            with contextlib.suppress(OSError):
                self.folder.rmdir()

    def release(self) -> None:
        self.lock.release()
