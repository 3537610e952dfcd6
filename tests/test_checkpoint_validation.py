"""Every validation error, triggered by a real malformed checkpoint: exit 2, one line naming the file."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from safetensors.torch import load_file, save_file
from typer.testing import CliRunner

from dflash_eval.cli import app

runner = CliRunner()


def edit_config(folder: Path, change) -> None:
    config = json.loads((folder / "config.json").read_text())
    change(config)
    (folder / "config.json").write_text(json.dumps(config))


def edit_weights(folder: Path, change) -> None:
    weights = load_file(str(folder / "model.safetensors"))
    change(weights)
    save_file(weights, str(folder / "model.safetensors"))


def truncate(folder: Path) -> None:
    data = (folder / "model.safetensors").read_bytes()
    (folder / "model.safetensors").write_bytes(data[: len(data) // 2])


def corrupt_header(folder: Path) -> None:
    data = bytearray((folder / "model.safetensors").read_bytes())
    data[8:40] = b"\x00\xff" * 16
    (folder / "model.safetensors").write_bytes(bytes(data))


def plain_model(folder: Path, test_bed) -> None:
    shutil.copy(test_bed["qwen3"] / "config.json", folder / "config.json")


# (case, source drafter, how to break it, expected words in the one-line error)
CASES = [
    ("not a DFlash checkpoint", "zlab", "plain", "not a DFlash checkpoint: unknown format"),
    ("missing weight", "zlab", lambda f: edit_weights(f, lambda w: w.pop("layers.1.mlp.up_proj.weight")),
     "weights present failed: missing 1: layers.1.mlp.up_proj.weight"),
    ("unexpected weight", "zlab", lambda f: edit_weights(f, lambda w: w.__setitem__("extra.weight", w["norm.weight"].clone())),
     "no unexpected weights failed: unexpected 1: extra.weight"),
    ("fc fed fewer taps than configured", "zlab",
     lambda f: edit_weights(f, lambda w: w.__setitem__("fc.weight", w["fc.weight"][:, :128].contiguous())),
     "fc width = taps x hidden failed: fc expects 128 = 2 x 64; config lists 3 taps (192)"),
    ("vocabulary differs from the target", "zlab", lambda f: edit_config(f, lambda c: c.__setitem__("vocab_size", 999)),
     "vocabulary matches target failed"),
    ("tap beyond the target's layers", "zlab",
     lambda f: edit_config(f, lambda c: (c["dflash_config"].__setitem__("target_layer_ids", [1, 2, 6]), c.pop("num_target_layers"))),
     "taps < target layers failed: max tap 6 (speculators id 7), target has 6 layers"),
    ("tap beyond the target's layers, speculators numbering", "speculators",
     lambda f: edit_config(f, lambda c: c.__setitem__("aux_hidden_state_layer_ids", [2, 3, 7])),
     "max tap 6 (speculators id 7), target has 6 layers"),
    ("mask token id out of range", "zlab",
     lambda f: edit_config(f, lambda c: c["dflash_config"].__setitem__("mask_token_id", 100000)),
     "mask token id in drafter vocab failed: mask_token_id=100000"),
    ("truncated safetensors", "zlab", truncate, "truncated"),
    ("corrupted safetensors", "zlab", corrupt_header, "corrupted"),
    ("unknown dflash_config key", "zlab",
     lambda f: edit_config(f, lambda c: c["dflash_config"].__setitem__("anchor_in_context", True)),
     "config key 'dflash_config.anchor_in_context' is not implemented"),
    ("sample_from_anchor", "speculators", lambda f: edit_config(f, lambda c: c.__setitem__("sample_from_anchor", "yes")),
     "config key 'sample_from_anchor'='yes' is not true/false"),
    ("non-silu activation", "zlab", lambda f: edit_config(f, lambda c: c.__setitem__("hidden_act", "gelu")),
     "config key 'hidden_act'='gelu' is not implemented"),
    ("unknown layer type", "zlab",
     lambda f: edit_config(f, lambda c: c.__setitem__("layer_types", ["chunked_attention", "full_attention"])),
     "attention kind 'chunked_attention'"),
]


@pytest.mark.parametrize("case,source,breaker,expected", CASES, ids=[c[0] for c in CASES])
def test_malformed_checkpoint_is_refused_in_one_line(case, source, breaker, expected, drafter_dirs, test_bed, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(drafter_dirs[source], broken)
    plain_model(broken, test_bed) if breaker == "plain" else breaker(broken)
    result = runner.invoke(app, ["inspect", str(broken), "--target", str(test_bed["qwen3"])])
    assert result.exit_code == 2, result.output
    line = result.stderr.strip()
    assert "\n" not in line and "Traceback" not in result.output
    assert line.startswith(f"error: {broken}")
    assert expected in line


def test_hidden_size_mismatch_with_target(drafter_dirs, test_bed, tmp_path):
    from dflash_eval.testing.tiny import build_target

    wide = build_target("qwen3", tmp_path / "wide", test_bed["tokenizer"], hidden_size=96)
    result = runner.invoke(app, ["inspect", str(drafter_dirs["zlab"]), "--target", str(wide)])
    assert result.exit_code == 2
    assert "hidden size matches target failed: drafter taps are 64 wide, target hidden_size=96" in result.stderr


def test_inspect_shows_spec_and_checks(drafter_dirs, test_bed):
    result = runner.invoke(app, ["inspect", str(drafter_dirs["speculators"])], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "recorded verifier" in out  # the checkpoint records its target: checks ran against it
    assert "[1, 2, 3]" in out and "[2, 3, 4]" in out
    assert "192 = 3 taps x 64" in out
    assert "'<|mask|>'" in out
    assert "taps < target layers" in out and "FAIL" not in out


def test_inspect_without_target_says_what_it_skipped(drafter_dirs):
    result = runner.invoke(app, ["inspect", str(drafter_dirs["sliding"])], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    assert "target-dependent checks skipped" in result.stdout
    assert "sliding attention, window 3 from the query (q - k < 3, in block too), causal in block" in result.stdout
