"""`datapipe bench` has two forms, DATASET and --suite, each with only its own options."""

from __future__ import annotations

from pathlib import Path

import click
import pytest

from datapipe.cli.bench import bench_dataset, bench_suite

SHARED = {"workers"}


def _options(command: click.Command) -> dict[str, list[str]]:
    """name -> the command line that gives it a valid value."""
    lines = {}
    for param in command.params:
        if not isinstance(param, click.Option) or param.name in SHARED | {"suite"}:
            continue
        flag = param.opts[0]
        value = [] if param.is_flag else \
            [param.type.choices[0]] if isinstance(param.type, click.Choice) else ["1"]
        lines[param.name] = [flag, *value]
    return lines


@pytest.mark.parametrize("name, given", _options(bench_dataset).items())
def test_a_dataset_option_given_to_the_suite_is_one_line(cli, name: str,
                                                         given: list[str]) -> None:
    result = cli("bench", "--suite", "images", *given)
    assert result.code == 2 and result.out == ""
    assert result.err == f"datapipe: error: bench: {given[0]} apply to a DATASET, not to --suite\n"


@pytest.mark.parametrize("name, given", _options(bench_suite).items())
def test_a_suite_option_given_with_a_dataset_is_one_line(cli, tmp_path: Path, name: str,
                                                         given: list[str]) -> None:
    result = cli("bench", tmp_path, *given)
    assert result.code == 2 and result.out == ""
    assert result.err == f"datapipe: error: bench: {given[0]} apply only with --suite\n"


def test_every_wrong_option_is_named_in_the_one_line(cli) -> None:
    result = cli("bench", "--suite", "text", "--epochs", "3", "--ceiling", "--workers", "2",
                 "--cache-dir", "/nowhere")
    assert result.code == 2
    assert result.err == ("datapipe: error: bench: --cache-dir, --ceiling, --epochs apply to a "
                          "DATASET, not to --suite\n")


def test_bench_help_shows_both_forms_and_each_form_its_own(cli) -> None:
    both = cli("bench", "--help")
    assert both.code == 0
    assert "Usage: datapipe bench [OPTIONS] DATASET\n" in both.out
    assert "datapipe bench --suite\n" \
        "                      [images|text|convert|gpu|mixture|patches|scale|all]\n" \
        "                      [OPTIONS]\n" in both.out
    with_dataset, with_suite = both.out.split("Options with --suite:")
    assert "Options with a DATASET:" in with_dataset
    assert "--epochs" in with_dataset and "--repeats" not in with_dataset
    assert "--repeats" in with_suite and "--epochs" not in with_suite
    assert cli("bench", "-h").out == both.out

    dataset = cli("bench", "shards/", "--help")
    assert dataset.code == 0 and dataset.out.startswith("Usage: datapipe bench [OPTIONS] DATASET")
    assert "--ceiling" in dataset.out and "--suite" not in dataset.out
    suite = cli("bench", "--suite", "all", "--help")
    assert suite.code == 0 and suite.out.startswith("Usage: datapipe bench --suite\n  ")
    assert "--readme" in suite.out and "--ceiling" not in suite.out


def test_the_suite_form_reaches_the_suite_with_its_options(
        cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import datapipe.suite
    from datapipe.suite import Options

    calls: list[Options] = []

    def run(options: Options) -> int:
        calls.append(options)
        return 3

    monkeypatch.setattr(datapipe.suite, "run", run)
    result = cli("bench", "--suite", "all", "--repeats", "2", "--workers", "4", "--text-mb", "5",
                 "--out", tmp_path, "--skip", "dali,images:torch")
    assert result.code == 3  # the suite's own exit status
    assert calls == [Options(("images", "text", "convert", "gpu", "mixture", "patches"), 2,
                             2000, 5, 4,
                             tmp_path, Path("bench-data"),
                             skip=frozenset({"dali", "images:torch"}))]
    assert cli("bench", "--suite", "text", "--smoke").code == 3
    assert calls[1] == Options.smoke_test(("text",), Path("bench-results"), 2)
    # --suite all leaves scale out (its corpora take GBs, its runs minutes): named, it runs.
    assert cli("bench", "--suite", "scale", "--scale-max", "1000000").code == 3
    assert calls[2] == Options(("scale",), scale_max=10**6)
    refused = cli("bench", "--suite", "images", "--smoke", "--readme")
    assert refused.code == 2 and refused.err.count("\n") == 1
    assert "--readme with --smoke" in refused.err
