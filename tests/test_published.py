"""Published bands: the tables shipped in the package read back against the shared copies, the band math on
hand-computed cases, and runs of the dense test bed and of the demo's models, mapped to a published pair by
the Hugging Face cache layout they are loaded from, printing the band line with the JSON carrying it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dflash_eval.cli import app
from dflash_eval.core.bands import position, span
from dflash_eval.formats.published import TABLES, bands_for, identify, published_pairs, table

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "data"  # the team's copies of the published tables (README there)
needs_shared = pytest.mark.skipif(not (SHARED / "published_tau.json").exists(), reason="../shared/data is absent")


@needs_shared
@pytest.mark.parametrize("name", ["paper", "ddtree"])
def test_shipped_tables_are_the_shared_copies(name):
    shipped = REPO / "dflash_eval" / "data" / TABLES[name]
    assert shipped.read_bytes() == (SHARED / TABLES[name]).read_bytes()
    assert table(name)["source"] and len(table(name)["entries"]) == {"paper": 60, "ddtree": 120}[name]


def test_vllm_ci_floors_as_the_pr_states_them():
    """vllm-project/vllm #40727 (as issue 52 quotes it): floors mt-bench 3.82, humaneval 5.85, gsm8k 5.59 for
    z-lab/Qwen3-8B-DFlash-b16, measured 4.11-4.16 / 6.29 / 6.18; vLLM's pooled definition."""
    floors = table("vllm_ci")
    assert "#40727" in floors["source"] and floors["definition"] == "vllm"
    got = {e["dataset"]: (e["floor"], e["measured"]) for e in floors["entries"]
           if (e["target"], e["drafter"]) == ("Qwen/Qwen3-8B", "z-lab/Qwen3-8B-DFlash-b16")}
    assert got == {"mt-bench": (3.82, [4.11, 4.16]), "humaneval": (5.85, [6.29]), "gsm8k": (5.59, [6.18])}


def test_published_pairs_and_tree_columns():
    assert ("Qwen/Qwen3-8B", "z-lab/Qwen3-8B-DFlash-b16") in published_pairs()
    assert ("Qwen/Qwen3-Coder-30B-A3B-Instruct", "z-lab/Qwen3-Coder-30B-A3B-DFlash") in published_pairs()
    tree = [e for e in table("ddtree")["entries"] if e["verification"] == "ddtree_best_budget"
            and e["target"] == "Qwen/Qwen3-Coder-30B-A3B-Instruct" and e["dataset"] == "humaneval"
            and e["temperature"] == 0]
    assert [e["tau"] for e in tree] == [10.72]  # primer section 9: chain 8.02 vs best-budget tree 10.72


def test_band_position_by_hand():
    band = span([6.55, 6.61])
    assert band == [6.55, 6.61]
    assert position(6.0, [5.8, 6.2], band) == "below"  # the interval ends under 6.545
    assert position(6.0, [5.8, 6.546], band) == "inside"  # meets the rounding of 6.55
    assert position(7.0, [6.62, 7.3], band) == "above"  # starts over 6.615
    assert position(6.58, None, band) == "inside"  # one prompt: the point itself


def _hub_copy(folder: Path, repo: str, hub: Path, revision: str) -> Path:
    """`folder` laid out as huggingface_hub caches `repo` (models--ORG--NAME/snapshots/REVISION)."""
    snapshot = hub / ("models--" + repo.replace("/", "--")) / "snapshots" / revision
    shutil.copytree(folder, snapshot)
    return snapshot


def _run_and_report(tmp_path: Path, target: Path, drafter: Path, name: str, *extra: str) -> tuple[str, dict]:
    out = tmp_path / "run"
    result = CliRunner().invoke(app, ["run", "-d", f"{drafter}:{name}", "--target", str(target), "--prompts",
                                      "humaneval", "--limit", "2", "--max-new-tokens", "8", "--device", "cpu",
                                      "--no-html", "--out", str(out), *extra], env={"COLUMNS": "400"})
    assert result.exit_code == 0, result.output
    report = CliRunner().invoke(app, ["report", str(out), "--json"])
    assert report.exit_code == 0, report.output
    return result.output, json.loads(report.output)


def _check_band(output: str, summary: dict, name: str, revision: str, where: str) -> None:
    line = " ".join(output.split())  # the terminal wraps long lines
    assert "published z-lab/Qwen3-8B-DFlash-b16 on Qwen/Qwen3-8B, humaneval at temperature 0" in line
    assert "chain tau band 6.55-6.61" in line and f"{where.upper()} the band" in line
    assert "tree tau 9.67" in line and "vLLM CI floor (vllm #40727) >= 5.85" in line
    row = next(d for d in summary["verdict"]["drafters"] if d["name"] == name)
    (band,) = row["bands"]
    assert band["band"] == [6.55, 6.61] and band["position"] == where and band["dataset"] == "humaneval"
    assert [e["tau"] for e in band["chain"]] == [6.55, 6.61] and band["tree"][0]["tau"] == 9.67
    floor = band["floors"][0]
    assert floor["floor"] == 5.85 and floor["position"] == ("below" if floor["run_tau_micro"] < 5.85 else "above")
    assert f"revision {revision}" in band["identified"]
    assert any("2 humaneval prompts (paper: 164" in x for x in band["differs"]["paper"])
    assert band["run"]["definition"]["key"] == "zlab"


def test_dense_test_bed_as_a_published_pair(test_bed, drafter_dirs, tmp_path):
    """The dense bed's target and drafter loaded from a Hugging Face cache under the published names: the run
    prints the band line and `report --json` carries it."""
    hub = tmp_path / "hub"
    target = _hub_copy(test_bed["qwen3"], "Qwen/Qwen3-8B", hub, "b968826d9c46")
    drafter = _hub_copy(drafter_dirs["zlab"], "z-lab/Qwen3-8B-DFlash-b16", hub, "9b41424b7109")
    output, summary = _run_and_report(tmp_path, target, drafter, "mine")
    _check_band(output, summary, "mine", "9b41424b7109", "below")  # a random drafter: tau ~1


def test_a_published_pair_under_tree_budgets_shows_its_own_tree_tau_beside_ddtrees(test_bed, drafter_dirs, tmp_path):
    """`run --tree-budgets` (issue 51) writes the drafter's `tree`; the band's tree entry shows this run's tau per
    budget beside DDTree's best-budget figure, from the same document `report` reads."""
    hub = tmp_path / "hub"
    target = _hub_copy(test_bed["qwen3"], "Qwen/Qwen3-8B", hub, "b968826d9c46")
    drafter = _hub_copy(drafter_dirs["zlab"], "z-lab/Qwen3-8B-DFlash-b16", hub, "9b41424b7109")
    output, summary = _run_and_report(tmp_path, target, drafter, "mine", "--tree-budgets", "2,8")
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    tree = {e["budget"]: e["metrics"]["tau_macro"] for e in run["drafters"][0]["tree"]["by_budget"]}
    (band,) = next(d for d in summary["verdict"]["drafters"] if d["name"] == "mine")["bands"]
    assert {r["budget"]: r["tau_macro"] for r in band["tree_run"]} == tree
    line = " ".join(output.replace("│", " ").split())  # the verdict box wraps the line
    assert "tree tau 9.67" in line and f"this run: budget 2: {tree[2]:.2f}, budget 8: {tree[8]:.2f}" in line


def test_demo_models_as_a_published_pair(tmp_path):
    from dflash_eval.demo import drafter_paths, target_path

    hub = tmp_path / "hub"
    reference, _ = drafter_paths()
    target = _hub_copy(Path(target_path()), "Qwen/Qwen3-8B", hub, "demo-target")
    drafter = _hub_copy(Path(reference), "z-lab/Qwen3-8B-DFlash-b16", hub, "demo-drafter")
    output, summary = _run_and_report(tmp_path, target, drafter, "demo-reference")
    # the demo's reference accepts nearly every slot of its B = 8 blocks on these two prompts (tau 7.00, thinking
    # on): above the band, with the block size and thinking named among the settings that differ
    _check_band(output, summary, "demo-reference", "demo-drafter", "above")
    differs = summary["verdict"]["drafters"][0]["bands"][0]["differs"]["paper"]
    assert "block size [8] (paper: 16)" in differs and "thinking on (paper: off)" in differs


def test_a_published_drafter_on_an_unnamed_target_gets_no_band():
    prov = {"target": {"name": "/models/mine", "path": "/models/mine"}, "temperature": 0,
            "prompts": {"sets": {"humaneval": 3}}}
    drafter = {"name": "z", "path": "/m/Qwen3-8B-DFlash-b16", "spec": {"block_size": 16}, "metrics": {}}
    pair = identify(prov, drafter)
    assert pair["target"] is None and pair["drafter"] == "z-lab/Qwen3-8B-DFlash-b16"
    (doc,) = bands_for({"provenance": prov, "drafters": [drafter]})["z"]
    assert doc["dataset"] is None and "not recognised as Qwen/Qwen3-8B" in doc["line"]
    assert bands_for({"provenance": prov, "drafters": [{**drafter, "path": "/m/other"}]}) == {}


# ------------------------------------------------------------------ numbers that should not be (core/implausible.py)

from dflash_eval.core.implausible import MIN_STEPS, drafter_flags, position_flags, tau_flags  # noqa: E402


def test_implausible_rules_by_hand():
    assert [f["rule"] for f in tau_flags(17.0, 16, "x")] == ["tau_above_block"]
    assert [f["rule"] for f in tau_flags(0.6, 16, "x")] == ["tau_below_one"] and tau_flags(16.0, 16, "x") == []
    assert [f["rule"] for f in position_flags([1.0, 1.0, 1.0], MIN_STEPS, "x")] == ["all_one"]
    assert "onnxruntime-genai #2460" in position_flags([1.0, 1.0], MIN_STEPS, "x")[0]["means"]
    assert [f["rule"] for f in position_flags([0.0, 0.0], MIN_STEPS, "x")] == ["all_zero"]
    assert position_flags([1.0, 1.0], MIN_STEPS - 1, "x") == []  # a short text accepted whole is ordinary
    rising = position_flags([0.5, 0.25, 0.3], 100, "x")
    assert [f["rule"] for f in rising] == ["non_monotone"] and "slot 3 0.3000 > slot 2 0.2500" in rising[0]["detail"]
    whole = {"name": "copy", "spec": {"block_size": 4}, "metrics": {"tau_macro": 4.0, "tau_micro": 4.0},
             "counts": {"steps": 40, "reach_counts": [40, 40, 40]}}
    assert [f["rule"] for f in drafter_flags(whole)] == ["all_one"]


def test_a_drafter_never_right_is_flagged_in_run_report_and_diff(test_bed, drafter_dirs, tmp_path):
    """A random drafter over enough steps accepts nothing at any slot: the run's verdict, `report --json` and
    `diff` flag it with what it usually means; a trained drafter beside it is not flagged."""
    out = tmp_path / "run"
    result = CliRunner().invoke(app, ["run", "-d", f"{drafter_dirs['zlab']}:random", "-d", f"{drafter_dirs['sliding']}:other",
                                      "--target", str(test_bed["qwen3"]), "--limit", "3", "--max-new-tokens", "24",
                                      "--device", "cpu", "--no-html", "--out", str(out)], env={"COLUMNS": "300"})
    assert result.exit_code == 0, result.output
    run = json.loads((out / "run.json").read_text())
    reach = {d["name"]: d["counts"]["reach_counts"] for d in run["drafters"]}
    steps = {d["name"]: d["counts"]["steps"] for d in run["drafters"]}
    zero = [n for n in reach if not any(reach[n]) and steps[n] >= MIN_STEPS]
    assert "random" in zero, (reach, steps)  # the fixture's random drafter accepts nothing on these prompts
    assert "IMPLAUSIBLE (all_zero)" in " ".join(result.output.split())
    report = json.loads(CliRunner().invoke(app, ["report", str(out), "--json"]).output)
    rows = {d["name"]: d for d in report["verdict"]["drafters"]}
    for name in reach:
        assert [f["rule"] for f in rows[name]["flags"]] == (["all_zero"] if name in zero else [])
    diffed = CliRunner().invoke(app, ["diff", f"{out}:random", f"{out}:other", "--json"])
    assert diffed.exit_code == 0, diffed.output
    flags = json.loads(diffed.stdout)["flags"]
    assert any(f["rule"] == "all_zero" and f["where"].startswith("A: drafter random") for f in flags)
