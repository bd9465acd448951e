"""`--engine ray`: the converters as tasks on a real (local, 2-CPU) Ray instance write exactly
the local engine's bytes, resume a killed run the same way, and fail in one line."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from datapipe.errors import DataError
from datapipe.format import Dataset
from preprocess.image_ops import ImageSettings
from preprocess.image_sources import list_images
from preprocess.images import ImageWork, convert_span
from tests.conftest import run_cli_process
from tests.imagegen import make_image_folder, write_awkward_images
from tests.integration.test_kill_resume import _kill_after_shards
from tests.preprocess.sample_files import photo_rows, write_hf_parquet, write_tars
from tests.preprocess.test_convert_sft import CHATS, make_chat_tokenizer
from tests.preprocess.test_convert_text import DOCS, train_wordpiece
from tests.preprocess.test_image_inputs import linked_class_tree

ray = pytest.importorskip("ray")


@pytest.fixture(scope="module")
def ray_address() -> str:
    """A Ray instance of this test process, for the module; its address for CLI processes."""
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    try:
        yield ray.get_runtime_context().gcs_address
    finally:
        ray.shutdown()


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> Path:
    src = make_image_folder(tmp_path_factory.mktemp("ray") / "src", classes=3, per_class=20,
                            size=(160, 120))
    write_awkward_images(src / "class_1")
    return src


def assert_same_files(a: Path, b: Path) -> None:
    names = sorted(p.name for p in a.iterdir())
    assert names == sorted(p.name for p in b.iterdir())
    assert any(n.startswith("shard-00001") for n in names), "needs several shards"
    for name in names:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


def test_images_on_ray_are_byte_identical_to_the_local_engine(cli, ray_address: str,
                                                             images: Path,
                                                             tmp_path: Path) -> None:
    args = ["--short-side", 64, "--shard-size", "20KB"]
    local = run_cli_process("convert", "images", images, tmp_path / "local", *args,
                            "--workers", 2)
    assert local.returncode == 0, local.stderr
    on_ray = cli("convert", "images", images, tmp_path / "ray", *args, "--engine", "ray")
    assert on_ray.code == 0, on_ray.err
    assert_same_files(tmp_path / "local", tmp_path / "ray")
    rejects = (tmp_path / "ray" / "rejects.jsonl").read_text().splitlines()
    assert rejects and all(json.loads(r)["reason"] for r in rejects)
    assert ray.is_initialized(), "a Ray instance the caller started is left to the caller"


def test_linked_class_folders_on_ray_are_labelled_as_on_the_local_engine(
        cli, ray_address: str, tmp_path: Path) -> None:
    """The folder is scanned once, by the process that runs the command, for either engine."""
    src = linked_class_tree(tmp_path)
    args = ["--short-side", 32, "--shard-size", "2KB"]
    local = run_cli_process("convert", "images", src, tmp_path / "local", *args,
                            "--workers", 2)
    assert local.returncode == 0, local.stderr
    on_ray = cli("convert", "images", src, tmp_path / "ray", *args, "--engine", "ray")
    assert on_ray.code == 0, on_ray.err
    assert_same_files(tmp_path / "local", tmp_path / "ray")
    assert "skipped 2 links to folders SRC holds by their real paths" in on_ray.out
    with Dataset(tmp_path / "ray") as ds:
        assert sorted(int(label) for label in ds.scalar("label")) == [0, 0, 0, 1, 1, 2, 2]


@pytest.mark.parametrize("kind", ["tar", "parquet"])
def test_tars_and_parquet_on_ray_are_byte_identical_to_the_local_engine(
        cli, ray_address: str, tmp_path: Path, kind: str) -> None:
    """Ray tasks list the tars and read the images from tars and Parquet row groups."""
    if kind == "tar":
        write_tars(tmp_path / "src", count=3, per_tar=10)
    else:
        rows = photo_rows(30)
        write_hf_parquet(tmp_path / "src" / "train.parquet", rows["images"], row_group_size=8,
                         label=rows["label"], caption=rows["caption"])
    args = ["--short-side", 32, "--shard-size", "20KB"]
    local = run_cli_process("convert", "images", tmp_path / "src", tmp_path / "local", *args,
                            "--workers", 2)
    assert local.returncode == 0, local.stderr
    on_ray = cli("convert", "images", tmp_path / "src", tmp_path / "ray", *args,
                 "--engine", "ray")
    assert on_ray.code == 0, on_ray.err
    assert_same_files(tmp_path / "local", tmp_path / "ray")


@pytest.mark.parametrize("tokenizer", ["bytes", "wordpiece"])
def test_text_on_ray_is_byte_identical_to_the_local_engine(cli, ray_address: str,
                                                           tmp_path: Path,
                                                           tokenizer: str) -> None:
    corpus = tmp_path / "corpus.jsonl"
    records = [{"text": f"{DOCS[i % len(DOCS)]} {i}"} for i in range(3000)]
    lines = [json.dumps(r) for r in records]
    lines[7], lines[2500] = "not json", json.dumps({"text": " "})  # rejects, early and late
    corpus.write_text("\n".join(lines) + "\n")
    spec = str(train_wordpiece(tmp_path / "tok.json", DOCS)) if tokenizer != "bytes" else "bytes"
    args = ["--tokenizer", spec, "--append-eos", "--shard-size", "8KB"]
    for name, extra in [("one", ["--workers", 1]), ("two", ["--workers", 2]),
                        ("ray", ["--engine", "ray"])]:
        result = cli("convert", "text", corpus, tmp_path / name, *args, *extra)
        assert result.code == 0, result.err
    assert_same_files(tmp_path / "one", tmp_path / "two")
    _assert_batch_sizes_are_the_writers(spec)
    assert_same_files(tmp_path / "one", tmp_path / "ray")
    assert len((tmp_path / "ray" / "rejects.jsonl").read_text().splitlines()) == 2


def test_on_ray_a_run_past_max_rejects_fails_as_on_the_local_engine(cli, ray_address: str,
                                                                     images: Path,
                                                                     tmp_path: Path) -> None:
    """Both engines end in the same OutputDirectory: the same limit, message and exit status."""
    results = {engine: cli("convert", "images", images, tmp_path / engine, "--short-side", 32,
                           "--max-rejects", 0, "--engine", engine)
               for engine in ("local", "ray")}
    assert results["ray"].code == results["local"].code == 1
    assert results["ray"].err.replace("/ray/", "/local/") == results["local"].err
    assert "inputs rejected" in results["ray"].err
    assert not (tmp_path / "ray" / "manifest.json").exists()


def _assert_batch_sizes_are_the_writers(spec: str) -> None:
    """Workers size each document for the shard cut; the writer's own sum must agree."""
    import numpy as np

    from datapipe.format.schema import Column, token_type_for_vocab
    from datapipe.format.writer import rows_nbytes
    from preprocess.text import TokenWork, tokenize_batch
    from preprocess.tokenizers import load_tokenizer

    tokenizer = load_tokenizer(spec)
    dtype = Column("tokens", token_type_for_vocab(tokenizer.vocab_size)).numpy_dtype
    batch = tokenize_batch(TokenWork(tokenizer, dtype, 2), list(enumerate(DOCS + [""])))
    documents = np.split(batch.ids, np.cumsum(batch.lengths)[:-1])
    columns = (Column("tokens", f"tokens:{dtype}"), Column("length", "int32"))
    assert batch.sizes == rows_nbytes(columns, {"tokens": documents, "length": batch.lengths})
    assert batch.rejects == [(len(DOCS), len(DOCS), None)]  # None: an empty document


@pytest.mark.slow
def test_killed_ray_run_resumes_to_the_local_engines_bytes(ray_address: str, tmp_path: Path
                                                           ) -> None:
    src = make_image_folder(tmp_path / "src", classes=4, per_class=60, size=(320, 240))
    args = ["convert", "images", str(src), "OUT", "--short-side", "128", "--shard-size", "60KB"]
    clean = tmp_path / "clean"
    assert run_cli_process(*[a.replace("OUT", str(clean)) for a in args]).returncode == 0
    out = tmp_path / "killed"
    on_ray = [a.replace("OUT", str(out)) for a in args] + ["--engine", "ray",
                                                           "--address", ray_address]
    _kill_after_shards(on_ray, out, shards=3)
    assert not (out / "manifest.json").exists()
    rerun = run_cli_process(*on_ray)
    assert rerun.returncode == 0, rerun.stderr
    assert "kept from the interrupted run" in rerun.stdout
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in clean.iterdir())
    for path in clean.iterdir():
        assert (out / path.name).read_bytes() == path.read_bytes(), path.name


def test_a_task_error_arrives_as_its_one_line_error(ray_address: str, images: Path) -> None:
    """A node that cannot see SRC stops the run naming SRC, rather than rejecting every
    input as unreadable; the error crosses Ray as the DataError it is."""
    from preprocess.ray_engine import RayEngine

    items = list_images(images).items
    work = ImageWork(items, ImageSettings(short_side=32), "/nowhere/src")
    engine = RayEngine(None, 0)
    with pytest.raises(DataError, match=r"SRC /nowhere/src is not visible on .*shared"):
        list(engine.map_ordered(convert_span, work, [(0, 4), (4, 8)]))
    engine.close()
    assert ray.is_initialized()


@pytest.mark.parametrize("address, message", [
    ("127.0.0.1:9", "--address 127.0.0.1:9: cannot reach a Ray cluster there"),
    ("no-port-here", "expected HOST:PORT, ray://HOST:PORT or auto"),
])
def test_bad_address_is_one_line_and_quick(images: Path, tmp_path: Path, address: str,
                                           message: str) -> None:
    started = time.monotonic()
    result = run_cli_process("convert", "images", images, tmp_path / "out", "--engine", "ray",
                             "--address", address, timeout=60)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
    assert time.monotonic() - started < 60  # bounded: never ray.init's minute of retries


def test_address_without_ray_engine_is_refused(cli, images: Path, tmp_path: Path) -> None:
    result = cli("convert", "images", images, tmp_path / "out", "--address", "127.0.0.1:6379")
    assert result.code == 2 and "--address applies only to --engine ray" in result.err


def test_missing_ray_says_how_to_install_and_local_never_imports_it(images: Path,
                                                                    tmp_path: Path) -> None:
    hide_ray = tmp_path / "hide"
    (hide_ray / "ray").mkdir(parents=True)
    (hide_ray / "ray" / "__init__.py").write_text("raise ImportError('No module named ray')\n")
    env_path = f"{hide_ray}:{Path(__file__).resolve().parents[2]}"
    result = subprocess.run(
        [sys.executable, "-m", "datapipe.cli", "convert", "images", str(images),
         str(tmp_path / "out"), "--engine", "ray"],
        capture_output=True, text=True, timeout=60, env={"PYTHONPATH": env_path})
    assert result.returncode == 2, result.stderr
    assert "pip install 'datapipe[ray]'" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    code = ("import sys; from datapipe.cli import main; "
            f"main(['convert', 'images', {str(images)!r}, {str(tmp_path / 'local')!r}, "
            "'--short-side', '32', '--workers', '2']); print(sorted(m for m in sys.modules "
            "if m == 'ray' or m.startswith('ray.')))")
    local = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           timeout=60)
    assert local.returncode == 0, local.stderr
    assert local.stdout.strip().endswith("[]")


@pytest.fixture(scope="module")
def chat_tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_chat_tokenizer(tmp_path_factory.mktemp("chat_tokenizer"))


@pytest.mark.parametrize("kind", ["chat", "prompt-completion"])
def test_fine_tuning_text_on_ray_is_byte_identical_to_the_local_engine(
        cli, ray_address: str, tmp_path: Path, chat_tokenizer: Path, kind: str) -> None:
    """The chat template travels to Ray's tasks with the tokenizer; masks come back with ids."""
    if kind == "chat":
        pytest.importorskip("transformers")
        records = [{"messages": CHATS[i % len(CHATS)]} for i in range(600)]
    else:
        records = [{"prompt": f"{DOCS[i % len(DOCS)]} ", "completion": str(i)}
                   for i in range(3000)]
    lines = [json.dumps(r) for r in records]
    lines[7] = json.dumps({"messages": [{"role": "user", "content": "no answer"}]} if
                          kind == "chat" else {"prompt": "no completion"})
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("\n".join(lines) + "\n")
    args = ["--tokenizer", chat_tokenizer, "--shard-size", "8KB"]
    for name, extra in [("one", ["--workers", 1]), ("ray", ["--engine", "ray"])]:
        result = cli("convert", "text", corpus, tmp_path / name, *args, *extra)
        assert result.code == 0, result.err
    assert_same_files(tmp_path / "one", tmp_path / "ray")
    with Dataset(tmp_path / "ray") as ds:
        assert ds.manifest.column("loss_mask") is not None
    assert len((tmp_path / "ray" / "rejects.jsonl").read_text().splitlines()) == 1
