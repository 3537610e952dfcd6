"""The doctor names speculators' mis-scaled teacher (final norm applied as x * w on a target whose norm is
x * (1 + w), speculators <= 0.8.1 for every Qwen3.5-style target, 0.9.0 for qwen3_5_moe_text / qwen3_next)
and measures it: agreement of the drafts with the target's argmax under both conventions, paired over
prompts, on the doctor's own trajectories."""

from __future__ import annotations

import json
import shutil
from types import SimpleNamespace

import pytest
import torch
from typer.testing import CliRunner

from dflash_eval.cli import app
from dflash_eval.commands.doctor_norm import agreement_tables, norm_case, norm_convention_check

# transformers' internals: also run on the oldest supported transformers (scripts/compat.sh)
pytestmark = pytest.mark.compat

runner = CliRunner()
PROMPTS, TOKENS = 8, 24


@pytest.mark.parametrize("version, model_type, applies", [
    ("0.8.1", "qwen3_5_text", True), ("0.8.1", "qwen3_5", True), ("0.7.0", "qwen3_next", True),
    ("0.9.0", "qwen3_5_text", False), ("0.9.0", "qwen3_5", False), ("0.9.1.dev2", "qwen3_5_text", False),
    ("0.9.0", "qwen3_5_moe_text", True), ("0.9.0", "qwen3_next", True),
    ("0.8.1", "qwen3", False), ("0.9.0", "qwen3", False), (None, "qwen3_5_text", None), ("main", "qwen3_next", None),
])
def test_which_checkpoints_got_the_wrong_norm_by_version_and_model_type(version, model_type, applies):
    assert norm_case(version, model_type)["applies"] is applies


def test_agreement_under_both_conventions_by_hand():
    # prompt_len 2, tokens 6: anchors j = 0, 1 (a = 2, 3); slot i compares with the token after a + i - 1
    traj = SimpleNamespace(id="p", prompt_len=2, tokens=list(range(6)))
    right = [9, 9, 7, 8, 5, 9]
    wrong = [9, 9, 7, 1, 2, 9]  # differs at positions 3 and 4
    drafts = [[[7, 1], [1, 2]]]  # a=2: slots at p=2 (7: both), p=3 (1: wrong); a=3: p=3 (1: wrong), p=4 (2: wrong)
    counted = agreement_tables(drafts, [traj], [right], [wrong])
    assert counted["tables"] == {"right": {"p": (4, 1)}, "wrong": {"p": (4, 4)}}
    assert counted["differing"] == {"slots": 3, "right": 0, "wrong": 3}
    assert counted["positions"] == {"all": 3, "differ": 2}  # positions 2, 3, 4 (the last token has no next)
    out = norm_convention_check({"speculators_version": "0.8.1", "verifier": None}, "qwen3", drafts, [traj],
                                [right], None)
    assert out["applies"] is False and out["measured"] is False and out["finding"] is None


@pytest.fixture(scope="module")
def norm_drafters(test_bed, tmp_path_factory):
    """The tiny qwen3_5_text target with a trained-looking final norm weight (zero-centred storage, gain
    1 + w, w ~ 0.5 +- 0.5: a plain x * w then changes the argmax at about half the positions), and two
    drafters trained on its greedy continuations: the right teacher (written as speculators 0.9.0) and
    the mis-scaled one, labels from lm_head(x * w) (written as speculators 0.8.1)."""
    from safetensors.torch import load_file, save_file

    from dflash_eval.demo.train import fixture_config, greedy_sequences, train_drafter
    from dflash_eval.model.target import load_target
    from dflash_eval.pipeline.prompts import DEMO_PROMPTS

    root = tmp_path_factory.mktemp("norm")
    target_dir = root / "qwen3_5_text-normed"
    shutil.copytree(test_bed["qwen3_5_text"], target_dir)
    weights = load_file(target_dir / "model.safetensors")
    norm = weights["model.norm.weight"]
    weights["model.norm.weight"] = 0.5 + 0.5 * torch.randn(norm.shape, generator=torch.Generator().manual_seed(0))
    save_file(weights, str(target_dir / "model.safetensors"), metadata={"format": "pt"})
    target = load_target(str(target_dir), device="cpu", dtype="float32")
    sequences = greedy_sequences(target, list(DEMO_PROMPTS[:PROMPTS]), TOKENS)
    out = {"target": target_dir}
    for name, teacher, version in (("good", "offset", "0.9.0"), ("plain", "plain", "0.8.1")):
        folder = train_drafter(target, sequences, fixture_config(block_size=4, steps=80, anchors_per_step=32, teacher_norm=teacher),
                               root / name)
        config = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps({**config, "speculators_version": version}, indent=2))
        out[name] = folder
    return out


def _doctor(drafter, target, tmp_path):
    result = runner.invoke(app, ["doctor", "-d", str(drafter), "--target", str(target), "--max-new-tokens", str(TOKENS),
                                 "--limit", str(PROMPTS), "--no-thinking", "--no-context-variants", "--cache-dir", str(tmp_path / "c"),
                                 "--out", str(tmp_path / "doc")], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    return json.loads((tmp_path / "doc" / "doctor.json").read_text()), result.stdout


def test_a_drafter_trained_against_the_plain_norm_is_named_and_measured(norm_drafters, tmp_path):
    report, stdout = _doctor(norm_drafters["plain"], norm_drafters["target"], tmp_path / "plain")
    check = report["norm_convention"]
    assert check["applies"] is True and check["model_type"] == "qwen3_5_text" and check["speculators_version"] == "0.8.1"
    assert check["agreement"]["wrong"] > check["agreement"]["right"] + 0.2, check["agreement"]
    assert check["wrong_vs_right"]["low"] > 0 and check["wrong_vs_right"]["p_value"] < 0.05
    assert check["differing_slots"]["wrong"] > 2 * check["differing_slots"]["right"]
    assert "the teacher was mis-scaled: speculators 0.8.1 (before 0.9.0)" in report["verdict"]
    assert "MIS-SCALED TEACHER" in stdout and report["passes"] == {"variants": PROMPTS}

    good, stdout = _doctor(norm_drafters["good"], norm_drafters["target"], tmp_path / "good")
    check = good["norm_convention"]
    assert check["applies"] is False and check["finding"] is None and "mis-scaled" not in good["verdict"]
    assert check["agreement"]["right"] > check["agreement"]["wrong"] + 0.2, check["agreement"]
    assert "teacher's final norm: speculators 0.9.0 builds a qwen3_5_text" in stdout
    print("norm convention agreement (right, wrong): plain-teacher drafter",
          report["norm_convention"]["agreement"], "good drafter", check["agreement"])
