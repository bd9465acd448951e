"""What `convert images` does with every odd entry of a source tree: nothing vanishes unlisted,
and no single input stops the run."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest
from PIL import Image

from datapipe.format import Dataset
from preprocess.filesystems import special_devices
from tests.conftest import run_cli_process
from tests.imagegen import jpeg_bytes, make_image_folder, noise_image
from tests.preprocess.helpers import unprivileged


def _rejects(out: Path) -> dict[str, str]:
    lines = (out / "rejects.jsonl").read_text().splitlines()
    return {r["source"]: r["reason"] for r in map(json.loads, lines)}


def _paths(out: Path) -> list[str]:
    with Dataset(out) as ds:
        return [ds[i]["path"] for i in range(len(ds))]


def _odd_tree(root: Path, outside: Path) -> Path:
    """class_0 and class_1 with two photos each, plus one of every odd kind of entry."""
    src = make_image_folder(root, classes=2, per_class=2)
    photo = jpeg_bytes(noise_image(40, 30, 9))
    (outside / "album").mkdir(parents=True)
    (outside / "linked.jpg").write_bytes(photo)
    (outside / "album" / "in_album.jpg").write_bytes(photo)
    (src / "class_0" / "nested" / "deeper").mkdir(parents=True)
    (src / "class_0" / "nested" / "deeper" / "deep.jpg").write_bytes(photo)
    (src / "class_0" / "file_link.jpg").symlink_to(outside / "linked.jpg")
    (src / "class_0" / "folder_link").symlink_to(outside / "album")
    (src / "class_0" / "dangling.jpg").symlink_to(outside / "gone.jpg")
    (src / "class_1" / "loop").symlink_to(src / "class_1")
    (src / "class_1" / ".DS_Store").write_bytes(b"\0\0\0\1Bud1")
    (src / "class_1" / ".git" / "objects").mkdir(parents=True)
    (src / "class_1" / ".git" / "objects" / "x.jpg").write_bytes(photo)
    (src / "class_1" / "notes.txt").write_text("not an image\n")
    os.mkfifo(src / "class_1" / "pipe.jpg")
    (src / "README.txt").write_text("a file outside every class folder\n")
    return src


def test_every_entry_is_converted_or_listed_with_a_reason(cli, tmp_path: Path) -> None:
    src = _odd_tree(tmp_path / "src", tmp_path / "elsewhere")
    result = cli("convert", "images", src, tmp_path / "out", "--short-side", 32, "--workers", 1)
    assert result.code == 0, result.err
    assert sorted(_paths(tmp_path / "out")) == sorted([
        "class_0/img_000.jpg", "class_0/img_001.jpg", "class_1/img_000.jpg",
        "class_1/img_001.jpg", "class_0/nested/deeper/deep.jpg", "class_0/file_link.jpg",
        "class_0/folder_link/in_album.jpg"])
    rejects = _rejects(tmp_path / "out")
    expected = {"class_0/dangling.jpg": "broken symlink", "class_1/loop": "symlink loop",
                "class_1/.DS_Store": "hidden", "class_1/.git": "hidden",
                "class_1/notes.txt": "not an image", "class_1/pipe.jpg": "not a regular file",
                "README.txt": "not in a class folder"}
    assert sorted(rejects) == sorted(expected)
    for source, words in expected.items():
        assert words in rejects[source], (source, rejects[source])
    assert f"rejected {len(expected)} inputs" in result.out
    with Dataset(tmp_path / "out") as ds:
        assert ds.manifest.stats == {"inputs": 7 + len(expected), "rejected": len(expected)}
        assert ds.manifest.classes == ("class_0", "class_1")


def test_strict_stops_at_a_dangling_symlink(cli, tmp_path: Path) -> None:
    src = make_image_folder(tmp_path / "src", classes=1, per_class=2)
    (src / "class_0" / "gone.jpg").symlink_to(tmp_path / "nowhere.jpg")
    result = cli("convert", "images", src, tmp_path / "out", "--strict")
    assert result.code == 1
    assert "class_0/gone.jpg: broken symlink" in result.err
    assert len(result.err.strip().splitlines()) == 1


@pytest.mark.parametrize("how", ["permissions", "simulated"])
def test_unreadable_folder_is_a_reject_not_a_silent_gap(cli, tmp_path: Path, how: str,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    src = make_image_folder(tmp_path / "src", classes=2, per_class=2)
    locked = src / "class_1" / "locked"
    locked.mkdir()
    (locked / "inside.jpg").write_bytes(jpeg_bytes(noise_image(40, 30, 3)))
    out = tmp_path / "out"
    if how == "permissions":
        prefix = unprivileged()
        locked.chmod(0)
        try:
            probe = None if prefix is None else subprocess.run(
                [*prefix, sys.executable, "-c", "import os, sys; os.listdir(sys.argv[1])",
                 str(locked)], capture_output=True, timeout=30)
            if probe is None or probe.returncode == 0:
                pytest.skip("cannot run a process that file permissions apply to")
            result = subprocess.run([*prefix, sys.executable, "-m", "datapipe.cli", "convert",
                                     "images", str(src), str(out), "--workers", "1"],
                                    capture_output=True, text=True, timeout=120)
        finally:
            locked.chmod(0o755)
        assert result.returncode == 0, result.stderr
    else:
        scandir = os.scandir

        def refuse(folder=".") -> object:
            if os.fspath(folder) == str(locked):
                raise PermissionError(13, "Permission denied", str(locked))
            return scandir(folder)

        monkeypatch.setattr(os, "scandir", refuse)
        assert cli("convert", "images", src, out, "--workers", 1).code == 0
    assert _rejects(out) == {"class_1/locked": "cannot list folder (Permission denied)"}
    assert len(_paths(out)) == 4


def _fifo_manifest(tmp_path: Path) -> Path:
    src = make_image_folder(tmp_path / "imgs", classes=1, per_class=1)
    os.mkfifo(tmp_path / "pipe.jpg")
    lines = ["path,label", f"{next(src.rglob('*.jpg')).relative_to(tmp_path)},0", "pipe.jpg,0"]
    (tmp_path / "list.csv").write_text("\n".join(lines) + "\n")
    return tmp_path / "list.csv"


def test_a_fifo_named_in_a_manifest_is_rejected_not_waited_on(tmp_path: Path) -> None:
    manifest = _fifo_manifest(tmp_path)
    try:
        result = run_cli_process("convert", "images", manifest, tmp_path / "out", "--workers", 1,
                                 timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("conversion blocked reading a FIFO")
    assert result.returncode == 0, result.stderr
    assert _rejects(tmp_path / "out") == {"pipe.jpg": "not a regular file"}


def test_bad_jsonl_manifest_lines_are_rejects_with_their_line(cli, tmp_path: Path) -> None:
    src = make_image_folder(tmp_path / "imgs", classes=1, per_class=2)
    good = [json.dumps({"path": str(p.relative_to(tmp_path)), "label": 1})
            for p in sorted(src.rglob("*.jpg"))]
    lines = [good[0], "{not json", '["a list"]', '{"label": 2}', good[1]]
    (tmp_path / "list.jsonl").write_text("\n".join(lines) + "\n")
    result = cli("convert", "images", tmp_path / "list.jsonl", tmp_path / "out")
    assert result.code == 0, result.err
    assert _rejects(tmp_path / "out") == {
        "list.jsonl:2": "list.jsonl line 2: not a JSON object",
        "list.jsonl:3": "list.jsonl line 3: not a JSON object",
        "list.jsonl:4": "list.jsonl line 4: no 'path'"}
    assert len(_paths(tmp_path / "out")) == 2


def _save(image: Image.Image, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    image.save(path)
    return path


def test_an_image_too_wide_for_jpeg_is_a_reject_and_the_run_goes_on(cli, tmp_path: Path) -> None:
    src = make_image_folder(tmp_path / "src", classes=1, per_class=2)
    _save(Image.new("RGB", (300, 1), (200, 10, 10)), src / "class_0" / "strip.png")
    result = cli("convert", "images", src, tmp_path / "out", "--short-side", 256)
    assert result.code == 0, result.err
    reason = _rejects(tmp_path / "out")["class_0/strip.png"]
    assert "76800x256" in reason and "65,500" in reason
    assert len(_paths(tmp_path / "out")) == 2
    strict = cli("convert", "images", src, tmp_path / "strict", "--strict")
    assert strict.code == 1 and "strip.png" in strict.err
    assert "Traceback" not in strict.err and len(strict.err.strip().splitlines()) == 1


def _limit_memory(megabytes: int):
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (megabytes << 20, megabytes << 20))
    return apply


@pytest.mark.parametrize("encoding", ["jpeg", "raw"])
def test_oversized_output_is_rejected_before_it_is_allocated(tmp_path: Path,
                                                             encoding: str) -> None:
    # 1x20,000 at short side 256 is 256x5,120,000: 3.9 GB of RGB, beyond this 1 GiB cap.
    src = make_image_folder(tmp_path / "src", classes=1, per_class=2)
    _save(Image.new("L", (1, 20_000), 128), src / "class_0" / "thread.png")
    result = subprocess.run(
        [sys.executable, "-m", "datapipe.cli", "convert", "images", str(src),
         str(tmp_path / "out"), "--encoding", encoding, "--workers", "1"],
        capture_output=True, text=True, timeout=120, preexec_fn=_limit_memory(1024))
    assert result.returncode == 0, result.stderr[-2000:]
    reason = _rejects(tmp_path / "out")["class_0/thread.png"]
    assert "256x5120000" in reason and "--max-pixels 89,478,485" in reason


def test_max_pixels_rejects_from_the_header_and_can_be_raised(cli, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch
                                                              ) -> None:
    src = make_image_folder(tmp_path / "src", classes=1, per_class=1, size=(96, 64))
    small = cli("convert", "images", src, tmp_path / "small", "--short-side", 0,
                "--max-pixels", 5000)
    assert small.code == 1 and "0 of 1 inputs converted" in small.err  # its only input
    assert _rejects(tmp_path / "small") == {
        "class_0/img_000.jpg": "stored size 96x64 is 6,144 pixels, over --max-pixels 5,000"}
    # A budget above PIL's own decompression-bomb limit is honoured, not overruled by PIL.
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)
    large = cli("convert", "images", src, tmp_path / "large", "--short-side", 0,
                "--max-pixels", 10_000, "--workers", 1)
    assert large.code == 0, large.err
    assert _paths(tmp_path / "large") == ["class_0/img_000.jpg"]
    assert Image.MAX_IMAGE_PIXELS == 1000
    bad = cli("convert", "images", src, tmp_path / "bad", "--max-pixels", 0)
    assert bad.code == 2 and "--max-pixels" in bad.err


@pytest.mark.parametrize("fmt", ["arrow", "msgpack"])
def test_names_that_are_not_utf8_are_converted_and_listed_readably(cli, tmp_path: Path,
                                                                  fmt: str) -> None:
    src = make_image_folder(tmp_path / "src", classes=1, per_class=1)
    folder = os.fsencode(src / "class_0")
    with open(folder + b"/caf\xe9.jpg", "wb") as f:
        f.write(jpeg_bytes(noise_image(40, 30, 5)))
    with open(folder + b"/r\xe9sum\xe9.txt", "wb") as f:
        f.write(b"not an image")
    result = cli("convert", "images", src, tmp_path / "out", "--format", fmt)
    assert result.code == 0, result.err
    assert sorted(_paths(tmp_path / "out")) == ["class_0/caf\\xe9.jpg", "class_0/img_000.jpg"]
    assert list(_rejects(tmp_path / "out")) == ["class_0/r\\xe9sum\\xe9.txt"]
    strict = cli("convert", "images", src, tmp_path / "strict", "--strict")
    assert strict.code == 1 and "class_0/r\\xe9sum\\xe9.txt: not an image" in strict.err


def _convert_under_timeout(src: Path, out: Path, *args: object) -> subprocess.CompletedProcess:
    """The CLI in a process of its own: an input that makes it run forever fails the test."""
    try:
        return run_cli_process("convert", "images", src, out, "--workers", 1, *args,
                               timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail(f"convert images {src} did not end within 60 s")


@pytest.mark.parametrize("name", ["list.csv", "list.jsonl"])
def test_a_fifo_as_the_list_of_images_is_refused_at_once(tmp_path: Path, name: str) -> None:
    os.mkfifo(tmp_path / name)
    result = _convert_under_timeout(tmp_path / name, tmp_path / "out")
    assert result.returncode == 1
    assert result.stderr.strip() == (f"datapipe: error: {tmp_path / name}: not a regular file "
                                     "(or a link to none)")


def test_links_to_the_root_proc_and_sys_are_rejects_and_the_run_ends(tmp_path: Path) -> None:
    """Once a scan that never ended (growing ~22 MB/s): every folder of /proc, followed."""
    if "proc" not in special_devices().values():
        pytest.skip("no proc filesystem mounted here")
    src = make_image_folder(tmp_path / "src", classes=2, per_class=2)
    (src / "class_0" / "root").symlink_to("/")
    (src / "class_0" / "proc").symlink_to("/proc")
    (src / "class_1" / "sys").symlink_to("/sys")
    (src / "class_1" / "self_environ.jpg").symlink_to("/proc/self/environ")  # a regular file
    (src / "class_1" / "src_again").symlink_to(src)
    started = time.monotonic()
    result = _convert_under_timeout(src, tmp_path / "out")
    assert result.returncode == 0, result.stderr
    assert time.monotonic() - started < 30
    rejects = _rejects(tmp_path / "out")
    assert rejects == {
        "class_0/root": "symlink loop: leads back to a folder it is in; not followed",
        "class_0/proc": "on a special filesystem (proc), which holds no image files: not walked",
        "class_1/sys": "on a special filesystem (sysfs), which holds no image files: not walked",
        "class_1/self_environ.jpg": "on a special filesystem (proc), which holds no image "
                                    "files: not read",
        "class_1/src_again": "symlink loop: leads back to a folder it is in; not followed"}
    assert len(_paths(tmp_path / "out")) == 4


def test_a_folder_reached_by_two_links_is_walked_once(cli, tmp_path: Path) -> None:
    src = make_image_folder(tmp_path / "src", classes=2, per_class=1)
    album = tmp_path / "elsewhere" / "album"
    (album / "inner").mkdir(parents=True)
    (album / "a.jpg").write_bytes(jpeg_bytes(noise_image(40, 30, 1)))
    (album / "inner" / "b.jpg").write_bytes(jpeg_bytes(noise_image(40, 30, 2)))
    (src / "class_0" / "album").symlink_to(album)
    (src / "class_1" / "same_album").symlink_to(album)
    (src / "class_1" / "inner_again").symlink_to(album / "inner")
    result = cli("convert", "images", src, tmp_path / "out", "--workers", 1)
    assert result.code == 0, result.err
    assert sorted(_paths(tmp_path / "out")) == [
        "class_0/album/a.jpg", "class_0/album/inner/b.jpg", "class_0/img_000.jpg",
        "class_1/img_000.jpg"]
    assert _rejects(tmp_path / "out") == {
        "class_1/inner_again": "the same folder as class_0/album/inner, walked already (each "
                               "folder is walked once)",
        "class_1/same_album": "the same folder as class_0/album, walked already (each folder "
                              "is walked once)"}


def linked_class_tree(tmp_path: Path) -> Path:
    """Three classes of two images; class_0/sib links to ../class_1 (met before class_1 by
    the sorted walk), class_2/back to class_0 (met after it), class_0/ext to a folder outside
    SRC, with one image."""
    src = make_image_folder(tmp_path / "src", classes=3, per_class=2)
    (src / "class_0" / "sib").symlink_to(Path("..") / "class_1")
    (src / "class_2" / "back").symlink_to(src / "class_0")
    outside = tmp_path / "elsewhere" / "album"
    outside.mkdir(parents=True)
    (outside / "a.jpg").write_bytes(jpeg_bytes(noise_image(40, 30, 3)))
    (src / "class_0" / "ext").symlink_to(outside)
    return src


def test_a_link_never_takes_another_class_s_images(cli, tmp_path: Path) -> None:
    src = linked_class_tree(tmp_path)
    out = tmp_path / "out"
    result = cli("convert", "images", src, out, "--workers", 2)
    assert result.code == 0, result.err
    with Dataset(out) as ds:
        labels = {ds[i]["path"]: int(ds[i]["label"]) for i in range(len(ds))}
    # Each real folder keeps its own label; the folder outside SRC takes its link's class.
    assert labels == {"class_0/ext/a.jpg": 0, "class_0/img_000.jpg": 0, "class_0/img_001.jpg": 0,
                      "class_1/img_000.jpg": 1, "class_1/img_001.jpg": 1,
                      "class_2/img_000.jpg": 2, "class_2/img_001.jpg": 2}
    tail = "which SRC holds by its real path: walked there, under its own class, not here"
    assert _rejects(out) == {"class_0/sib": f"a link to class_1, {tail}",
                             "class_2/back": f"a link to class_0, {tail}"}
    assert ("skipped 2 links to folders SRC holds by their real paths (first: class_0/sib -> "
            "class_1); each is walked there, under its own class") in result.out


def test_special_devices_come_from_the_mount_table(tmp_path: Path) -> None:
    table = tmp_path / "mountinfo"
    table.write_text(
        "22 27 0:21 / /proc rw,relatime - proc proc rw\n"
        "24 27 0:6 / /dev rw,relatime - devtmpfs devtmpfs rw,mode=755\n"
        "25 24 0:23 / /dev/shm rw,relatime - tmpfs tmpfs rw\n"
        "27 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw\n"
        "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n"
        "garbage\n")
    assert special_devices(str(table)) == {os.makedev(0, 21): "proc", os.makedev(0, 6): "devtmpfs",
                                           os.makedev(0, 38): "cgroup2"}
    assert special_devices(str(tmp_path / "none")) == {}


@pytest.mark.parametrize("where", ["out", "class_0/out", ".out"])
def test_out_inside_src_is_left_out_of_the_scan(cli, tmp_path: Path, where: str) -> None:
    """A rerun with --overwrite once scanned its own output: a class of shards, all rejects."""
    src = make_image_folder(tmp_path / "src", classes=2, per_class=2)
    out = src / where
    first = cli("convert", "images", src, out, "--workers", 1)
    assert first.code == 0, first.err
    shards = {p.name: p.read_bytes() for p in out.glob("shard-*")}
    again = cli("convert", "images", src, out, "--workers", 1, "--overwrite")
    assert again.code == 0, again.err
    assert "of 4 inputs (0 rejected, 0 %)" in again.out
    with Dataset(out) as ds:
        assert ds.manifest.classes == ("class_0", "class_1")
        assert ds.manifest.stats == {"inputs": 4, "rejected": 0}
    assert {p.name: p.read_bytes() for p in out.glob("shard-*")} == shards


def test_other_datasets_and_conversions_in_progress_are_not_inputs(cli, tmp_path: Path) -> None:
    src = make_image_folder(tmp_path / "src", classes=2, per_class=2)
    photos = make_image_folder(tmp_path / "photos", classes=1, per_class=2)
    assert cli("convert", "images", photos, src / "class_0" / "old", "--workers", 1).code == 0
    assert cli("convert", "images", photos, src / "older", "--workers", 1).code == 0
    (src / "class_1" / "running").mkdir()
    (src / "class_1" / "running" / ".datapipe-convert.jsonl").write_text('{"fingerprint": 1}\n')
    (src / "class_1" / "running" / "shard-00000.arrow").write_bytes(b"half")
    result = cli("convert", "images", src, tmp_path / "out", "--workers", 1)
    assert result.code == 0, result.err
    assert "of 4 inputs (0 rejected, 0 %)" in result.out
    with Dataset(tmp_path / "out") as ds:
        assert ds.manifest.classes == ("class_0", "class_1")  # not `older`
        assert ds.manifest.stats == {"inputs": 4, "rejected": 0}


def test_a_stopped_run_with_out_inside_src_resumes(cli, tmp_path: Path) -> None:
    """The scan of the first run, before OUT existed, and of the rerun, with OUT holding the
    journal, must list the same inputs, or the rerun is refused as one with other inputs."""
    src = make_image_folder(tmp_path / "src", classes=2, per_class=6, size=(96, 64))
    (src / "class_1" / "zz_notes.txt").write_text("not an image, and last\n")
    args = ["convert", "images", src, src / "out", "--workers", 1, "--shard-size", "8KB"]
    stopped = cli(*args, "--strict")
    assert stopped.code == 1 and "zz_notes.txt" in stopped.err
    assert (src / "out" / ".datapipe-convert.jsonl").exists()
    resumed = cli(*args)
    assert resumed.code == 0, resumed.err
    assert "kept from the interrupted run" in resumed.out
    assert list(_rejects(src / "out")) == ["class_1/zz_notes.txt"]
