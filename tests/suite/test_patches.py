"""The patches suite at smoke size: datapipe's PatchLoader and the torch DataLoader running
transformers' processors both deliver every photo of an epoch, for both models, and the report
gives the ratio and the patch efficiency."""

from __future__ import annotations

from pathlib import Path

import pytest

from datapipe.suite import Options, run
from datapipe.suite.groups.patches import GROUP
from tests.suite.outputs import check_outputs

DATA = Path(__file__).resolve().parents[2] / "bench-data"  # kept between runs, as the suite's
PEERS = ("torch-qwen2_vl", "datapipe-qwen2_vl", "torch-siglip2", "datapipe-siglip2")


def test_a_before_twin_measures_its_own_model(tmp_path: Path) -> None:
    """--before twins are named "<peer>-before": each still runs its own model's batches."""
    opts = Options.smoke_test(("patches",), tmp_path, data=DATA, before=DATA.parent)
    meta = {"forms": {"photos": {"path": "photos"}, "native": {"path": "native"}},
            "workers": 2, "warmup": 0, "epochs": 1}
    jobs = {p.name: GROUP.job(p, meta, opts, tmp_path) for p in GROUP.all_peers(opts)}
    assert {name: (job.model, job.data) for name, job in jobs.items()
            if name.endswith("-before")} == {"datapipe-qwen2_vl-before": ("qwen2_vl", "native"),
                                             "datapipe-siglip2-before": ("siglip2", "native")}


@pytest.fixture(scope="module")
def smoke(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, str]:
    out = tmp_path_factory.mktemp("patches")
    assert run(Options.smoke_test(("patches",), out, data=DATA)) == 0
    data = check_outputs(out, ["patches-qwen2_vl", "patches-siglip2", "vlm-qwen2_vl"])
    assert "× the torch DataLoader + processing" in (out / "vlm.md").read_text()
    return data, (out / "patches.md").read_text()


def test_every_peer_delivers_every_photo_and_the_report_gives_the_goals(smoke: tuple) -> None:
    data, report = smoke
    outcomes = data["groups"]["patches"]["outcomes"]
    assert set(outcomes) == set(PEERS)
    photos = data["groups"]["patches"]["meta"]["photos"]["count"]
    for name in PEERS:
        (record,) = outcomes[name]["runs"]
        assert outcomes[name]["status"] == "ok", name
        assert record["rate"] > 0 and record["patches_per_image"] > 0, name
        assert 0 < record["images"] < photos, name  # an epoch less its first (clock) batch
    for model in ("qwen2_vl", "siglip2"):  # the same images give the same patch counts
        ours, theirs = (outcomes[f"{who}-{model}"]["runs"][0]["patches_per_image"]
                        for who in ("datapipe", "torch"))
        assert ours == pytest.approx(theirs, rel=1e-9), model
    assert "× the torch DataLoader + processor" in report
    assert "Qwen2-VL packed patch efficiency" in report


def test_the_vlm_group_delivers_every_conversation_with_its_efficiencies(smoke: tuple) -> None:
    data, _ = smoke
    group = data["groups"]["vlm"]
    outcomes = group["outcomes"]
    assert set(outcomes) == {"torch-vlm", "datapipe-vlm"}
    for name, outcome in outcomes.items():
        (record,) = outcome["runs"]
        assert outcome["status"] == "ok", name
        assert record["rate"] > 0 and 0 < record["efficiency"] <= 1, name
        assert 0 < record["samples"] < group["meta"]["conversations"], name
