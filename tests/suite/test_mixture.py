"""The mixture suite at smoke size: every row runs through the suite and its report leads with
the goal lines; the three sources are the one dataset's samples (or tokens) split 60 / 30 / 10;
without the `datasets` module only the interleave row is left out."""

from __future__ import annotations

import hashlib
from collections import Counter
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from datapipe.format.dataset import Dataset
from datapipe.sampling.mixture_weights import apportion
from datapipe.suite import Options, run, runner
from datapipe.suite.groups import mixture
from datapipe.suite.groups import mixture_peers as mp
from datapipe.suite.groups.mixture_peers import SPLITS, split_by_share
from datapipe.suite.machine import describe
from tests.suite.outputs import check_outputs

DATA = Path(__file__).resolve().parents[2] / "bench-data"  # kept between runs, as the suite's
ROWS = ("images-one", "images-mix", "tokens-one", "tokens-mix", "interleave")
SHARES = [Fraction(share).limit_denominator() for share in SPLITS.values()]


@pytest.fixture(scope="module")
def smoke(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, str, str]:
    """suite.json's data, suite.md and mixture.md of `bench --suite mixture --smoke`."""
    out = tmp_path_factory.mktemp("mixture")
    assert run(Options.smoke_test(("mixture",), out, data=DATA)) == 0
    data = check_outputs(out, ["mixture-images", "mixture-tokens"])
    return data, (out / "suite.md").read_text(), (out / "mixture.md").read_text()


def test_every_row_runs_and_the_report_leads_with_the_goals(smoke: tuple) -> None:
    data, suite_md, own = smoke
    outcomes = data["groups"]["mixture"]["outcomes"]
    assert set(outcomes) == set(ROWS)
    for name in ROWS:
        (record,) = outcomes[name]["runs"]
        assert outcomes[name]["status"] == "ok", name
        if name.startswith("images"):  # one epoch of every photo, by either loader
            assert record["epoch_images"] == [64] and record["rate"] > 0, name
        else:
            assert record["real_tokens"] > 0 and record["epoch_s"] > 0, name
            # One epoch at smoke size: no epoch after the first to take a steady rate of.
            assert record.get("epoch_rates", []) == [], name
    tokens = data["groups"]["mixture"]["meta"]["tokens"]
    # An epoch of the mixture by tokens is the one dataset's epoch, to within a document per
    # source (each source's quota ends with the document that crosses it).
    one, mix = (outcomes[n]["runs"][0]["real_tokens"] for n in ("tokens-one", "tokens-mix"))
    assert one == tokens["tokens"] and abs(mix - one) <= 3 * 16384
    panels = {p["key"]: p for p in data["suites"]["mixture"]}
    assert {e["name"] for e in panels["mixture-images"]["entries"]} == set(ROWS[:2])
    assert {e["name"] for e in panels["mixture-tokens"]["entries"]} == set(ROWS[2:])
    goals = ["images-mix ≥ 0.95× images-one: ", "tokens-mix ≥ 0.95× tokens-one: ",
             "tokens-mix ≥ 10× interleave: "]
    for goal in goals:
        assert goal in suite_md and f"- {goal}" in own
    # In each panel the goal lines come first, right after its answer, then the table.
    for key, goal in (("images", goals[0]), ("tokens", goals[1])):
        section = suite_md.split(f"### Mixture of three datasets: {key}")[1]
        answer, job = section.split("\n\n")[1:3]
        assert answer.startswith("**Mixture of three datasets") and job.startswith(goal)
        assert job.split(": ", 1)[1].split(" (")[0].endswith("×")
    for label in (p.label for p in mixture.GROUP.peers):
        assert label in own


def test_the_sources_split_the_one_dataset_60_30_10(smoke: tuple) -> None:
    meta = smoke[0]["groups"]["mixture"]["meta"]
    images, tokens = meta["images"], meta["tokens"]
    one = samples(images["one"])
    parts = [samples(images["mix"][name]) for name in SPLITS]
    assert [len(p) for p in parts] == apportion(len(one), SHARES)  # 60 / 30 / 10 of them
    assert sum(parts, Counter()) == one  # every sample once: bytes, label and path
    with Dataset(tokens["one"]) as ds:
        total, longest = int(ds.scalar("length").sum()), int(ds.scalar("length").max())
        tokenizer = ds.manifest.tokenizer
    for name in SPLITS:  # converted as the one dataset was
        with Dataset(tokens["mix"][name]) as ds:
            assert ds.manifest.tokenizer == tokenizer and tokenizer["hash"]
    documents = [documents_of(tokens["mix"][name]) for name in SPLITS]
    assert sum(documents, Counter()) == documents_of(tokens["one"])
    counts = [sum(len(d) * n for d, n in part.items()) // 2 for part in documents]  # uint16
    for count, target in zip(counts, apportion(total, SHARES), strict=True):
        assert abs(count - target) <= longest, (counts, total)  # within its last document


def samples(path: str) -> Counter:
    with Dataset(path) as ds:
        return Counter((hashlib.sha1(s["image"].tobytes()).hexdigest(), s["label"], s["path"])
                       for s in ds)


def documents_of(path: str) -> Counter:
    with Dataset(path) as ds:
        return Counter(s["tokens"].tobytes() for s in ds)


def test_split_by_share_cuts_at_the_shares_of_the_sizes() -> None:
    sizes = np.random.default_rng(1).integers(1, 500, 1001)
    parts = split_by_share(sizes)
    ids = np.concatenate(list(parts.values()))
    assert sorted(ids.tolist()) == list(range(1001))  # disjoint, and every id
    totals = np.cumsum([sizes[p].sum() for p in parts.values()])
    targets = np.cumsum(apportion(int(sizes.sum()), SHARES))
    assert all(totals - targets >= 0) and all(totals - targets < sizes.max())
    assert [len(p) for p in split_by_share([1] * 64).values()] == [39, 19, 6]


def test_without_datasets_only_the_interleave_row_is_left_out(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    absent = runner.module_absent
    monkeypatch.setattr(runner, "module_absent", lambda name: name == "datasets" or
                        absent(name))
    opts = Options.smoke_test(("mixture",), tmp_path, data=DATA)
    result = runner.run_group(mixture.GROUP, opts, describe())
    assert result.outcomes["interleave"].status == "not installed (datasets)"
    assert result.meta["tokens"]["hf"] == {}
    for name in ROWS[:-1]:
        assert result.outcomes[name].status == "ok" and result.outcomes[name].runs, name
    lines = mixture.goal_lines(result, "tokens")
    assert lines[0].startswith("tokens-mix ≥ 0.95× tokens-one: ")
    assert lines[1] == "tokens-mix ≥ 10× interleave: not measured (not installed (datasets))"
    tokens = next(p for p in mixture.GROUP.panels(result) if p.key == "mixture-tokens")
    assert [e.status for e in tokens.entries] == ["ok", "ok", "not installed (datasets)"]
    assert tokens.job.startswith(lines[0]) and f"{lines[1]}." in tokens.job


def test_the_goals_against_one_dataset_pair_the_runs_of_each_round() -> None:
    """A round the machine ran 20 % slower moves both rows of that round, not the verdict;
    the 10× goal, far from the spread, stays the medians' ratio."""
    def tokens(*rates: float) -> runner.Outcome:
        return runner.Outcome("ok", [{"real_tokens": r, "epoch_s": 1.0} for r in rates])

    outcomes = {"tokens-one": tokens(100.0, 80.0, 120.0), "tokens-mix": tokens(98.0, 79.0, 94.0),
                "interleave": tokens(5.0, 4.0, 6.0)}
    result = runner.GroupResult("mixture", {}, {}, outcomes)
    # Medians 100 vs 94: 0.94; the rounds: 0.98, 0.99, 0.78: their median 0.98.
    assert mixture.goal_lines(result, "tokens") == [
        "tokens-mix ≥ 0.95× tokens-one: 0.98× (the median of the rounds' ratios of each run's "
        "median epoch, each round's two runs back to back; the medians' ratio: 0.94×) (met)",
        "tokens-mix ≥ 10× interleave: 18.80× (met)"]
    outcomes["tokens-mix"] = tokens(93.0, 75.0, 94.0)  # 7 % slower in every round
    assert mixture.goal_lines(result, "tokens")[0].startswith(
        "tokens-mix ≥ 0.95× tokens-one: 0.93× (")
    assert mixture.goal_lines(result, "tokens")[0].endswith("(NOT met)")


def test_a_token_runs_steady_rate_is_its_median_epoch() -> None:
    """A burst of other work slowing a third of a run's epochs moves its whole-run rate, not
    its median epoch; the goal pairs the steady rates."""
    steady = [100.0] * 7
    burst = [60.0, 60.0, 60.0, 97.0, 97.0, 97.0, 97.0]  # 3 % slower, and a burst
    one = {"real_tokens": 700.0, "epoch_s": 7.0, "epoch_rates": steady}
    mix = {"real_tokens": 700.0, "epoch_s": 8.6, "epoch_rates": burst}
    assert mixture.steady_rate("tokens", mix) == 97.0
    assert mixture.steady_rate("tokens", {"real_tokens": 9.0, "epoch_s": 3.0}) == 3.0
    assert mixture.steady_rate("images", {"rate": 5.0, "epoch_rates": [1.0]}) == 5.0
    result = runner.GroupResult("mixture", {}, {}, {
        "tokens-one": runner.Outcome("ok", [one] * 3),
        "tokens-mix": runner.Outcome("ok", [mix] * 3), "interleave": runner.Outcome("skipped")})
    line = mixture.goal_lines(result, "tokens")[0]
    assert line.startswith("tokens-mix ≥ 0.95× tokens-one: 0.97× (") and "ratio: 0.81×" in line
    assert line.endswith("(met)")


def test_a_token_run_times_each_epoch_after_the_first(tmp_path: Path) -> None:
    from tests.text.helpers import write_documents

    lengths = np.random.default_rng(0).integers(5, 60, 200).tolist()
    write_documents(tmp_path / "docs", lengths)
    record = mp.run_tokens(mp.Job(str(tmp_path / "docs"), 0, 4, max_tokens=256))
    assert record["real_tokens"] == 4 * sum(lengths)
    assert len(record["epoch_rates"]) == 3 and all(r > 0 for r in record["epoch_rates"])
