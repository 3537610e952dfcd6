"""`inspect --engines` (core/engine_readings.py): one table, one column per engine, one row per reading, each cell
the value and the code that decides it. Its rule rows are `doctor --engines`'s rules (one home): on the demo
drafters and on a z-lab-format test-bed drafter the cells that differ are exactly the rules doctor --engines
measures as differing, with the same words, and the engines refused are the same."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dflash_eval.cli import app
from dflash_eval.commands.inspect import inspect_drafter
from dflash_eval.core.engine_readings import READINGS, RULE_READINGS

runner = CliRunner()


def _doctor_engines(drafter: Path, target: Path, out: Path) -> dict:
    result = runner.invoke(app, ["doctor", "--engines", "-d", str(drafter), "--target", str(target), "--prompts", "demo",
                                 "--limit", "3", "--max-new-tokens", "16", "--no-thinking", "--device", "cpu",
                                 "--out", str(out)], env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    return json.loads((out / "engines.json").read_text())


def _matches(readings: dict, measured: dict) -> None:
    by_engine = {row["engine"]: row for row in measured["engines"]}
    assert [e["engine"] for e in readings["engines"]] == list(by_engine)
    for engine in readings["engines"]:
        row = by_engine[engine["engine"]]
        assert (engine["refused"] is not None) == ("refused" in row), engine
        if "refused" in row:
            assert engine["refused"] == row["refused"]
            continue
        rules = {r["rule"]: r for r in row.get("rules", [])}
        for reading, rule in RULE_READINGS.items():
            cell = next(r for r in readings["rows"] if r["reading"] == reading)["cells"][engine["engine"]]
            assert cell["differs"] == (rule in row["differs"]), (engine["engine"], rule)
            if rule in rules:  # the words doctor --engines gives the engine's reading of this rule
                assert cell["value"].startswith(rules[rule]["engine_reads"]), (cell["value"], rules[rule])


@pytest.mark.parametrize("which", [0, 1])
def test_demo_drafters_read_as_doctor_engines_measures(which, tmp_path):
    from dflash_eval.demo import drafter_paths, target_path

    drafter = drafter_paths()[which]
    readings = inspect_drafter(drafter, str(target_path()), engines=True).engines
    assert [r["reading"] for r in readings["rows"]] == list(READINGS)
    _matches(readings, _doctor_engines(drafter, target_path(), tmp_path / "doc"))
    window = next(r for r in readings["rows"] if r["reading"] == "window and paging")["cells"]
    assert window["zlab"]["differs"] and not window["speculators"]["differs"]  # one-row windows from the anchor


def test_a_zlab_test_bed_drafter_read_as_doctor_engines_measures(drafter_dirs, test_bed, tmp_path):
    folder = shutil.copytree(drafter_dirs["sliding"], tmp_path / "causal-false")
    config = json.loads((folder / "config.json").read_text())
    config["dflash_config"]["causal"] = False  # vLLM reads it, SGLang does not, llama.cpp refuses it
    (folder / "config.json").write_text(json.dumps(config))
    readings = inspect_drafter(folder, str(test_bed["qwen3"]), engines=True).engines
    _matches(readings, _doctor_engines(folder, test_bed["qwen3"], tmp_path / "doc"))
    causality = next(r for r in readings["rows"] if r["reading"] == "in-block causality")["cells"]
    assert causality["vllm"]["differs"] and not causality["sglang"]["differs"]


def test_readings_that_only_the_config_shows(drafter_dirs, tmp_path):
    folder = shutil.copytree(drafter_dirs["zlab"], tmp_path / "eagle")
    config = json.loads((folder / "config.json").read_text())
    config["eagle_aux_hidden_state_layer_ids"] = [1, 2, 3]  # vLLM takes these as given: output of layers 0, 1, 2
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "mask_embedding.pt").write_bytes(b"")  # its presence: vLLM replaces the MASK row with it
    cells = {r["reading"]: r["cells"] for r in inspect_drafter(folder, engines=True).engines["rows"]}
    assert cells["tap numbering"]["vllm"]["differs"] and "[0, 1, 2]" in cells["tap numbering"]["vllm"]["value"]
    assert not cells["tap numbering"]["sglang"]["differs"]
    assert cells["mask-token row"]["vllm"]["differs"] and "mask_embedding.pt" in cells["mask-token row"]["vllm"]["value"]
    assert cells["block size and clamp"]["vllm"]["differs"]  # vLLM never reads the trained block


def test_a_deepspec_checkpoint_is_read_by_deepspec_alone(drafter_dirs, test_bed, tmp_path):
    from safetensors.torch import load_file

    from dflash_eval.demo.checkpoint_writer import save_deepspec
    from dflash_eval.formats.checkpoints import read_spec
    from dflash_eval.testing.testbed import tiny_target_tables

    spec, _, _ = read_spec(drafter_dirs["zlab"])
    embed, head = tiny_target_tables(test_bed["qwen3"])
    folder = save_deepspec(tmp_path / "ds", spec, load_file(str(drafter_dirs["zlab"] / "model.safetensors")),
                           test_bed["qwen3"], target_embed=embed, target_lm_head=head)
    readings = inspect_drafter(folder, engines=True).engines
    refused = {e["engine"]: e["refused"] for e in readings["engines"]}
    assert refused["deepspec"] is None and all("slot 0 drafts" in refused[e] for e in ("vllm", "sglang", "llamacpp"))
    cells = {r["reading"]: r["cells"] for r in readings["rows"]}
    assert not cells["sample_from_anchor"]["deepspec"]["differs"] and cells["sample_from_anchor"]["zlab"]["differs"]


def test_the_cli_prints_the_table(drafter_dirs):
    result = runner.invoke(app, ["inspect", str(drafter_dirs["zlab"]), "--engines"], env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    assert "How each engine reads this checkpoint" in result.output and "DeepSpec" in result.output
