from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.conftest import run_cli_process
from tests.imagegen import make_image_folder


def test_inspect_images_shows_label_histogram(cli, image_folder: Path, tmp_path: Path) -> None:
    assert cli("convert", "images", image_folder, tmp_path / "out").code == 0
    result = cli("inspect", tmp_path / "out")
    assert result.code == 0
    assert "15 samples" in result.out and "class_1" in result.out and "#" in result.out
    summary = json.loads(cli("inspect", tmp_path / "out", "--json").out)
    assert summary["labels"] == {"class_0": 5, "class_1": 5, "class_2": 5}


def test_inspect_text_shows_length_stats(cli, tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("".join("x" * n + "\n" for n in range(1, 101)))
    assert cli("convert", "text", tmp_path / "a.txt", tmp_path / "out", "--tokenizer",
               "bytes").code == 0
    summary = json.loads(cli("inspect", tmp_path / "out", "--json").out)
    assert summary["lengths"]["min"] == 1 and summary["lengths"]["max"] == 100
    assert summary["lengths"]["p50"] == 50.5 and summary["lengths"]["total"] == 5050
    assert "p95" in cli("inspect", tmp_path / "out").out


def test_verify_names_corrupt_and_missing_shards(cli, image_folder: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert cli("convert", "images", image_folder, out, "--shard-size", "20KB").code == 0
    ok = cli("verify", out)
    assert ok.code == 0 and "intact" in ok.out
    shards = sorted(out.glob("shard-*.arrow"))
    data = bytearray(shards[0].read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size, one flipped byte
    shards[0].write_bytes(bytes(data))
    shards[1].unlink()
    bad = cli("verify", out)
    assert bad.code == 1
    assert f"{shards[0].name}: content hash differs" in bad.err
    assert f"{shards[1].name}: missing" in bad.err
    assert "2 of" in bad.err


def test_verify_of_a_non_dataset_is_one_line(cli, tmp_path: Path) -> None:
    result = cli("verify", tmp_path)
    assert result.code == 1 and len(result.err.strip().splitlines()) == 1


def test_cli_process_prints_no_traceback_for_user_mistakes(tmp_path: Path) -> None:
    result = run_cli_process("inspect", tmp_path / "nothing")
    assert result.returncode != 0
    assert "Traceback" not in result.stderr and "nothing" in result.stderr


def test_doctor_names_the_pil_build(cli) -> None:
    result = cli("doctor")
    assert result.code == 0 and result.out.startswith("PIL: pillow")


def test_bench_prints_samples_per_second_and_the_ceiling(cli, image_folder: Path,
                                                        tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert cli("convert", "images", image_folder, out).code == 0
    result = cli("bench", out, "--batch-size", "4", "--workers", "1", "--crop", "32",
                 "--epochs", "2", "--ceiling")
    assert result.code == 0, result.err
    lines = result.out.splitlines()
    # 2 epochs of 15 samples in batches of 4: 8 batches, the first (one a worker) not timed;
    # too few to time, so the loader runs on (tests/cli/test_bench_figures.py).
    assert " samples/s (" in lines[0] and "RandomResizedCrop(32)" in lines[0]
    assert lines[1].startswith("  the 2 epochs asked for timed 7 batches in ")
    assert lines[2].startswith("decode ceiling: ") and "loader at " in lines[2]


def test_bench_refuses_what_it_cannot_time(cli, image_folder: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert cli("convert", "images", image_folder, out).code == 0
    for args, message in [(["--epochs", "0"], "'--epochs'"), (["--workers", "-1"], "'--workers'")]:
        result = cli("bench", out, "--crop", "32", *args)
        assert result.code == 2 and message in result.err and "Traceback" not in result.err
    missing = cli("bench", tmp_path / "nowhere")
    assert missing.code != 0 and "no such dataset directory" in missing.err


def test_bench_device_cuda_without_cuda_is_one_line(cli, image_folder: Path,
                                                    tmp_path: Path) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    out = tmp_path / "out"
    assert cli("convert", "images", image_folder, out).code == 0
    result = cli("bench", out, "--device", "cuda", "--workers", "1", "--crop", "32")
    assert result.code == 2 and "Traceback" not in result.err
    assert result.err.strip() == ("datapipe: error: device 'cuda': torch "
                                  f"{torch.__version__} sees no CUDA device; use device='cpu'")


@pytest.mark.skipif("not __import__('torch').cuda.is_available()", reason="needs CUDA")
def test_bench_device_cuda_delivers_on_the_gpu(cli, image_folder: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert cli("convert", "images", image_folder, out).code == 0
    result = cli("bench", out, "--device", "cuda", "--batch-size", "4", "--workers", "1",
                 "--crop", "32", "--epochs", "2")
    assert result.code == 0, result.err
    assert " samples/s (" in result.out and "device=cuda" in result.out
    assert "the 2 epochs asked for timed 7 batches in " in result.out


def test_bench_wants_a_dataset_or_a_suite_and_options_that_fit(cli, tmp_path: Path) -> None:
    for args, message in [
        ([], "give a DATASET to measure, or --suite"),
        ([tmp_path, "--suite", "images"], "give a DATASET or --suite, not both"),
        (["--suite", "images", "--epochs", "3"], "--epochs apply to a DATASET, not to --suite"),
        ([tmp_path, "--repeats", "2"], "--repeats apply only with --suite"),
        (["--suite", "all", "--smoke", "--readme"], "--readme with --smoke"),
        (["--suite", "nothing"], "'--suite'"),
    ]:
        result = cli("bench", *args)
        assert result.code == 2, (args, result.err)
        assert message in result.err and len(result.err.strip().splitlines()) == 1, result.err


def test_bench_on_an_empty_dataset_says_it_is_empty(cli, image_folder: Path,
                                                    tmp_path: Path) -> None:
    """Before, it blamed --epochs and --batch-size ("make at most one batch")."""
    import dataclasses

    from datapipe.format import Manifest

    out = tmp_path / "out"
    assert cli("convert", "images", image_folder, out).code == 0
    empty = tmp_path / "empty"
    empty.mkdir()
    dataclasses.replace(Manifest.load(out), shards=(), stats={}).save(empty)
    result = cli("bench", empty, "--workers", "1", "--crop", "32")
    assert result.code == 1 and result.out == ""
    assert result.err == f"datapipe: error: {empty}: the dataset is empty, 0 samples\n"


def test_counts_read_as_one_or_many(cli, image_folder: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    converted = cli("convert", "images", image_folder, out)
    assert "converted 15 images of 15 inputs (0 rejected, 0 %) into 1 shard (" in converted.out
    assert "in 1 arrow v1 shard, " in cli("inspect", out).out
    assert cli("verify", out).out.endswith(": the 1 shard intact (15 samples)\n")
    one = tmp_path / "one"
    make_image_folder(one, classes=1, per_class=1)
    assert "converted 1 image of 1 input (0 rejected" in cli("convert", "images", one,
                                                              tmp_path / "o").out
    many = cli("convert", "images", image_folder, tmp_path / "many", "--shard-size", "1KB")
    assert re.search(r"into \d+ shards \(", many.out), many.out
