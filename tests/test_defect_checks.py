"""The checks engines added after their own bugs (core/checkpoint_defects.py): each fires on a checkpoint built with
that defect, in `inspect` before any run, and stays silent on the test bed's drafters; where a replay shows the
effect, the doctor's variant does (doctor/commands/defects.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from safetensors.torch import load_file, save_file
from typer.testing import CliRunner

from dflash_eval.cli import app
from dflash_eval.commands.inspect import inspect_drafter

runner = CliRunner()
NEW_CHECKS = ("no tap on the target's final layer", "block_size at one level", "recorded draft length within the block",
              "serving window covers the trained window", "MASK embedding row trained",
              "MASK row moved from its initialisation (--base)", "fc output within float16")


def _edited(src: Path, out: Path, config_edit=None, tensor_edit=None) -> Path:
    shutil.copytree(src, out)
    if config_edit is not None:
        config = json.loads((out / "config.json").read_text())
        config_edit(config)
        (out / "config.json").write_text(json.dumps(config))
    if tensor_edit is not None:
        state = load_file(str(out / "model.safetensors"))
        tensor_edit(state)
        save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
    return out


def _fired(result) -> dict[str, str]:
    return {c.name: c.detail for c in result.defects if not c.ok}


def test_silent_on_the_test_bed_drafters(drafter_dirs, trained, test_bed):
    target = str(test_bed["qwen3"])
    for name, folder in [*drafter_dirs.items(), ("trained", trained["qwen3"]["good"])]:
        result = inspect_drafter(folder, target, probe=True)
        assert {c.name for c in result.defects} >= {"no tap on the target's final layer", "block_size at one level",
                                                     "MASK embedding row trained", "fc output within float16"}, name
        assert _fired(result) == {} and result.warned == [], (name, _fired(result))


def test_silent_on_the_demo_drafters():
    from dflash_eval.demo import drafter_paths, target_path

    for folder in drafter_paths():
        result = inspect_drafter(folder, str(target_path()), probe=True)
        assert _fired(result) == {}, (folder, _fired(result))


def test_a_tap_on_the_final_layer(drafter_dirs, test_bed, tmp_path):
    bad = _edited(drafter_dirs["zlab"], tmp_path / "final", lambda c: c["dflash_config"].update(target_layer_ids=[1, 2, 5]))
    fired = _fired(inspect_drafter(bad, str(test_bed["qwen3"])))
    assert list(fired) == ["no tap on the target's final layer"] and "assert_no_final_target_layer" in fired[
        "no tap on the target's final layer"]


def test_block_size_at_two_levels(drafter_dirs, tmp_path):
    bad = _edited(drafter_dirs["zlab"], tmp_path / "levels", lambda c: c.update(block_size=8))
    fired = _fired(inspect_drafter(bad))
    assert list(fired) == ["block_size at one level"]
    assert "block_size=8, dflash_config.block_size=4" in fired["block_size at one level"]
    same = _edited(drafter_dirs["zlab"], tmp_path / "same", lambda c: c.update(block_size=4))  # equal: silent
    assert _fired(inspect_drafter(same)) == {}


def test_a_recorded_draft_length_past_the_block(drafter_dirs, tmp_path):
    def edit(config):
        config["speculators_config"]["proposal_methods"][0]["speculative_tokens"] = 4  # B = 4 holds 3 drafts
    fired = _fired(inspect_drafter(_edited(drafter_dirs["speculators"], tmp_path / "k", edit)))
    assert list(fired) == ["recorded draft length within the block"]
    assert "vllm-project/vllm #41834" in fired["recorded draft length within the block"]


def test_draft_lengths_and_export_refuse_k_past_the_block(drafter_dirs, test_bed, tmp_path):
    result = runner.invoke(app, ["run", "-d", str(drafter_dirs["zlab"]), "--target", str(test_bed["qwen3"]),
                                 "--draft-lengths", "2,4", "--out", str(tmp_path / "r")])
    assert result.exit_code == 2 and "k = 4 outside 1..3" in result.output and "#41834" in result.output


def test_a_serving_window_shorter_than_the_trained_one(drafter_dirs):
    fired = _fired(inspect_drafter(drafter_dirs["zlab"], draft_window=4096))
    assert list(fired) == ["serving window covers the trained window"]
    assert "32768" in fired["serving window covers the trained window"]
    assert _fired(inspect_drafter(drafter_dirs["zlab"], draft_window=32768)) == {}


def test_a_zero_or_untrained_mask_row(drafter_dirs, tmp_path):
    spec = inspect_drafter(drafter_dirs["speculators"]).spec

    def zero(state):
        state["embed_tokens.weight"][spec.mask_token_id] = 0
    fired = _fired(inspect_drafter(_edited(drafter_dirs["speculators"], tmp_path / "zero", tensor_edit=zero)))
    assert list(fired) == ["MASK embedding row trained"] and "all zero" in fired["MASK embedding row trained"]

    def copied(state):  # an initialisation copied into the row and two more: untrained rows look alike
        table = state["embed_tokens.weight"]
        row = table[5].clone()
        for i in (spec.mask_token_id, 3, 4):
            table[i] = row
    fired = _fired(inspect_drafter(_edited(drafter_dirs["speculators"], tmp_path / "copy", tensor_edit=copied)))
    assert "looks untrained" in fired["MASK embedding row trained"]


def test_a_mask_row_never_moved_from_its_base(drafter_dirs, tmp_path):
    spec = inspect_drafter(drafter_dirs["speculators"]).spec
    fired = _fired(inspect_drafter(drafter_dirs["speculators"], base=str(drafter_dirs["speculators"])))
    assert list(fired) == ["MASK row moved from its initialisation (--base)"]

    def nudge(state):
        state["embed_tokens.weight"][spec.mask_token_id] += 0.01
    moved = _edited(drafter_dirs["speculators"], tmp_path / "moved", tensor_edit=nudge)
    assert _fired(inspect_drafter(moved, base=str(drafter_dirs["speculators"]))) == {}


@pytest.fixture(scope="module")
def fc_overflow(trained, tmp_path_factory) -> Path:
    """The trained drafter with fc x 1e5: the same drafter in fp32 and bf16 (hidden_norm undoes the scale), past
    fp16's range (lmdeploy #4991)."""
    def scale(state):
        state["fc.weight"] = state["fc.weight"] * 1e5
    return _edited(trained["qwen3"]["good"], tmp_path_factory.mktemp("fc") / "fc", tensor_edit=scale)


def test_fc_overflowing_in_fp16(fc_overflow, trained):
    target = str(trained["qwen3"]["target"])
    fired = _fired(inspect_drafter(fc_overflow, target, probe=True))
    assert list(fired) == ["fc output within float16"] and "overflow float16" in fired["fc output within float16"]
    assert _fired(inspect_drafter(fc_overflow, target, probe=True, probe_dtype="bfloat16")) == {}


def _doctor(drafter: Path, target: Path, out: Path) -> dict:
    result = runner.invoke(app, ["doctor", "-d", str(drafter), "--target", str(target), "--prompts", "demo",
                                 "--limit", "6", "--max-new-tokens", "24", "--no-thinking", "--no-context-variants",
                                 "--device", "cpu", "--out", str(out)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    return json.loads((out / "doctor.json").read_text())


def test_doctor_replays_fc_in_fp16_where_it_overflows(fc_overflow, trained, tmp_path):
    doc = _doctor(fc_overflow, trained["qwen3"]["target"], tmp_path / "fc")
    assert doc["fc_range"]["float16"]["overflowed"] > 0 and doc["fc_range"]["float32"]["overflowed"] == 0
    rows = {r["variant"]: r for r in doc["variants"]}
    assert rows["fc computed in float16"]["tau_macro"] < rows["as configured"]["tau_macro"] - 0.5
    clean = _doctor(trained["qwen3"]["good"], trained["qwen3"]["target"], tmp_path / "clean")
    assert clean["fc_range"]["float16"]["overflowed"] == 0
    assert not any(r["variant"].startswith(("fc computed", "final-layer tap", "block_size")) for r in clean["variants"])


def test_doctor_replays_the_final_layer_tap_and_the_other_block_size(trained, tmp_path):
    def edit(config):  # the trained drafter is a speculators checkpoint
        config["aux_hidden_state_layer_ids"] = [2, 4, 6]  # z-lab 1, 3, 5: the test bed's last layer is 5
        config["transformer_layer_config"]["block_size"] = 3  # a level speculators' rules do not read
    bad = _edited(trained["qwen3"]["good"], tmp_path / "bad", edit)
    rows = {r["variant"]: r for r in _doctor(bad, trained["qwen3"]["target"], tmp_path / "doc")["variants"]}
    assert "final-layer tap 5 after the final norm (HF hidden_states[-1])" in rows
    assert "block_size 3 from transformer_layer_config.block_size" in rows
    assert rows["final-layer tap 5 after the final norm (HF hidden_states[-1])"]["identical_drafts"] < 1
