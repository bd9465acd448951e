"""The recipe group of the images suite: a smoke run through the suite reports its panel and
goals; its torchvision/timm peers run in .venv-vision, reported as not installed (with the
command that makes it) when that venv is absent; datapipe's rows that need steps this datapipe
lacks say which."""

from __future__ import annotations

import json
from dataclasses import asdict, replace
from pathlib import Path

import pytest

from datapipe.suite import Options, run
from datapipe.suite.groups import images, recipe, recipe_peers, vision
from datapipe.suite.runner import GroupResult, Outcome

NOT_INSTALLED = "not installed (run bash tools/setup_vision.sh)"
IMAGES_PEERS = frozenset(f"images:{p.name}" for p in images.GROUP.peers) | \
    {"aspect-jpegs", "aspect-datapipe"}
needs_vision = pytest.mark.skipif(not vision.VENV.ready(), reason=".venv-vision is absent "
                                  "(torchvision's own venv): run bash tools/setup_vision.sh")


def run_recipe(root: Path) -> tuple[dict, dict, str]:
    """The images suite at smoke sizes with the images group's peers skipped: the recipe
    group's results' JSON, its panel in suite.json and its own report."""
    opts = replace(Options.smoke_test(("images",), root / "out", data=root / "data"),
                   skip=IMAGES_PEERS)
    assert run(opts) == 0
    out = root / "out"
    panel = next(p for p in json.loads((out / "suite.json").read_text())["suites"]["images"]
                 if p["key"] == "recipe")
    assert (out / "recipe.png").read_bytes()[:4] == b"\x89PNG"
    return json.loads((out / "recipe.json").read_text()), panel, (out / "recipe.md").read_text()


@pytest.fixture(scope="module")
def smoke(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, dict, str]:
    return run_recipe(tmp_path_factory.mktemp("recipe"))


def expected_status(name: str) -> str:
    """ok, or the skip that names the steps this datapipe lacks."""
    return recipe_peers.missing(recipe.NEEDS.get(name, ())) or "ok"


def test_the_smoke_run_reports_the_recipe_panel_and_its_goals(smoke: tuple) -> None:
    data, panel, report = smoke
    statuses = {e["name"]: e["status"] for e in panel["entries"]}
    assert set(statuses) == {"torch", "datapipe", "datapipe-user", "datapipe-plain",
                             "datapipe-noop"}
    assert statuses["datapipe-plain"] == "ok"
    for name in ("datapipe", "datapipe-noop"):
        assert statuses[name] == expected_status(name)
    assert data["meta"]["batch"] == 16 and data["meta"]["recipe"] == recipe_peers.RECIPE
    for name, outcome in data["outcomes"].items():
        for record in outcome["runs"]:  # every run delivered float32 batches (clock checks)
            assert record["rate"] > 0 and record["epoch_images"] == [64], name
    assert "\n## Goals\n\n- datapipe" in report and "\n- datapipe-user" in report
    assert "goal ≤ 5%" in report or "do-nothing function's cost: not measured" in report
    assert "Mixup 0.8 / CutMix 1.0" in panel["job"]


def test_a_missing_step_skips_its_row_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """As a --before checkout made before Mixup existed: its rows are skipped, naming it."""
    found = recipe_peers.step
    monkeypatch.setattr(recipe_peers, "step",
                        lambda dp, name: None if name == "Mixup" else found(dp, name))
    assert recipe_peers.missing(recipe_peers.BUILT_IN).startswith("skipped: needs ")
    assert "dp.Mixup" in recipe_peers.missing(recipe_peers.BUILT_IN)
    assert recipe_peers.missing(()) is None


@needs_vision
def test_the_torch_peer_runs_in_the_vision_venv(smoke: tuple) -> None:
    data, panel, _ = smoke
    torch = next(e for e in panel["entries"] if e["name"] == "torch")
    assert torch["status"] == "ok" and torch["median"] > 0
    (record,) = data["outcomes"]["torch"]["runs"]
    assert record["epoch_images"] == [64] and record["import_s"] > 0
    assert data["outcomes"]["datapipe-user"]["status"] == expected_status("datapipe-user")


def test_without_the_vision_venv_its_peers_say_how_to_make_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    empty = tmp_path / "no-venv"
    empty.mkdir()
    monkeypatch.setenv("DATAPIPE_VISION_VENV", str(empty))
    data, _, report = run_recipe(tmp_path)
    assert data["outcomes"]["torch"] == {"status": NOT_INSTALLED, "runs": []}
    assert data["outcomes"]["datapipe-user"]["status"] == NOT_INSTALLED
    assert data["outcomes"]["datapipe-plain"]["status"] == "ok"
    assert f"| {NOT_INSTALLED}" in report.replace("  ", " ")


def test_a_half_made_vision_venv_is_not_ready(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATAPIPE_VISION_VENV", str(tmp_path / "venv"))
    python = vision.VENV.python()
    python.parent.mkdir(parents=True)
    python.touch()  # set-up killed before its end: no marker yet
    assert not vision.VENV.ready()
    (tmp_path / "venv" / vision.VENV.marker).touch()
    assert vision.VENV.ready()


def fake_result(rates: dict[str, float | None]) -> GroupResult:
    outcomes = {name: Outcome("ok", [{"rate": rate}]) if rate else Outcome("skipped: x")
                for name, rate in rates.items()}
    return GroupResult("recipe", {}, {}, outcomes, list(recipe.GROUP.peers))


def test_goals_compare_the_medians() -> None:
    lines = recipe.goal_lines(fake_result({"torch": 100.0, "datapipe": 300.0,
                                           "datapipe-user": 120.0, "datapipe-plain": 1000.0,
                                           "datapipe-noop": 960.0}))
    assert lines == ["datapipe: 3.00× torch (goal ≥ 2.5×: met)",
                     "datapipe-user: 1.20× torch (goal ≥ 1.3×: NOT met)",
                     "A per-sample function doing nothing costs 4.0% of the plain pipeline's "
                     "images/s, the median of the rounds' costs (each round runs the two back "
                     "to back; the medians' ratio: 4.0%) (goal ≤ 5%: met)"]
    lines = recipe.goal_lines(fake_result({"torch": None, "datapipe": 300.0,
                                           "datapipe-user": None, "datapipe-plain": 1000.0,
                                           "datapipe-noop": 900.0}))
    assert lines == ["datapipe ≥ 2.5× torch: not measured (skipped: x)",
                     "datapipe-user ≥ 1.3× torch: not measured (skipped: x)",
                     "A per-sample function doing nothing costs 10.0% of the plain pipeline's "
                     "images/s, the median of the rounds' costs (each round runs the two back "
                     "to back; the medians' ratio: 10.0%) (goal ≤ 5%: NOT met)"]


def test_the_do_nothing_cost_pairs_the_runs_of_each_round() -> None:
    """Round by round against the run beside it: a machine 20 % slower in one round moves
    both rows of that round, not the comparison."""
    plain = Outcome("ok", [{"rate": r} for r in (1000.0, 800.0, 1010.0)])
    noop = Outcome("ok", [{"rate": r} for r in (970.0, 1002.0, 780.0)])
    # Medians 1000 vs 970: 3 %; the rounds: 3 %, -25 %, 23 %: median 3 %.
    assert recipe.paired_cost(noop, plain) == pytest.approx(0.03)
    slower = Outcome("ok", [{"rate": r} for r in (940.0, 752.0, 950.0)])  # 6 % every round
    assert recipe.paired_cost(slower, plain) == pytest.approx(0.06)
    assert recipe.paired_cost(Outcome("ok", noop.runs[:2]), plain) is None


@needs_vision
def test_datapipe_runs_in_the_vision_venv_from_its_packages_alone(
        smoke: tuple, tmp_path: Path) -> None:
    """The mechanism of the datapipe-user row (torchvision in datapipe's workers), shown with
    the plain pipeline: only datapipe's packages join the venv's path."""
    data, _, _ = smoke
    peer = next(p for p in recipe.GROUP.peers if p.name == "datapipe-plain")
    job = recipe.GROUP.job(peer, data["meta"], None, tmp_path)
    record = vision.run_datapipe("recipe", peer, asdict(job), tmp_path)
    assert record["rate"] > 0 and record["epoch_images"] == [64]
    assert sorted(p.name for p in (tmp_path / "code").iterdir()) == ["datapipe", "preprocess"]
