"""`--semantics sglang` and `--semantics llamacpp`: a test per rule of core/engine_rules.py (each read in the
engine's code, file and function in docs/config-keys.md), the refusals by name, and `doctor --engines` on a
checkpoint with `dflash_config.causal`: the vLLM/SGLang split, with the causality rule named."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dflash_eval.cli import app
from dflash_eval.core import engine_rules
from dflash_eval.core.attention import AttentionConfig, LayerAttention
from dflash_eval.core.errors import InputError
from dflash_eval.core.semantics import VARIANT_SEMANTICS, apply_semantics, layers_under, rotary_dim
from dflash_eval.formats.checkpoints import read_spec
from dflash_eval.model.masks import anchor_block_mask
from dflash_eval.testing.testbed import write_random_drafter

runner = CliRunner()
S, F = "sliding_attention", "full_attention"


def config(types, window=8, use=True, is_causal=None, dflash_causal=None, fmt="zlab"):
    return AttentionConfig(layer_types=tuple(types), sliding_window=window if use else None, declared_window=window,
                           use_sliding_window=use, is_causal=is_causal, sliding_window_non_causal=None,
                           dflash_causal=dflash_causal, format=fmt)


def summary(layers):
    return [(x.kind, x.window, "causal" if x.causal_in_block else "bidir", x.window_from) for x in layers]


@pytest.mark.parametrize("rules, cfg, expected", [
    # SGLang _get_dflash_attention_type: is_causal on every layer; absent, sliding causal and full bidirectional
    ("sglang", config([S, F]), [("sliding", 8, "causal", "query"), ("full", None, "bidir", "query")]),
    ("sglang", config([S, F], is_causal=True), [("sliding", 8, "causal", "query"), ("full", None, "causal", "query")]),
    ("sglang", config([S, F], is_causal=False), [("sliding", 8, "bidir", "query"), ("full", None, "bidir", "query")]),
    # ... and dflash_config.causal is not read (vLLM honours it: the split)
    ("sglang", config([S, F], dflash_causal=True), [("sliding", 8, "causal", "query"), ("full", None, "bidir", "query")]),
    ("vllm", config([S, F], dflash_causal=True), [("sliding", 8, "causal", "query"), ("full", None, "causal", "query")]),
    # llama.cpp: llama_set_causal_attn(ctx_dft, false): every layer bidirectional; windows left of the query only
    ("llamacpp", config([S, F]), [("sliding", 8, "bidir", "query_left"), ("full", None, "bidir", "query_left")]),
])
def test_rules_per_engine(rules, cfg, expected):
    layers, why = layers_under(cfg, rules)
    assert summary(layers) == expected
    assert why.startswith({"sglang": "SGLang rules", "vllm": "vLLM rules", "llamacpp": "llama.cpp rules"}[rules])


def rows(mask):
    return ["".join("x" if v else "." for v in row) for row in mask.int().tolist()]


def test_window_masks_by_hand():
    """Anchor 5, block of 3, 7 context rows, W = 2 (columns: context 0..6 | block 0..2). SGLang's FlashAttention
    window (W - 1, W - 1) on a bidirectional layer limits both sides (z-lab's rule); llama.cpp's
    LLAMA_SWA_TYPE_STANDARD masks q - k >= W only, so a bidirectional block sees every later slot."""
    both = anchor_block_mask([5], [3], 7, LayerAttention("sliding", 2, False, "query"))
    left = anchor_block_mask([5], [3], 7, LayerAttention("sliding", 2, False, "query_left"))
    assert [r[:7] + "|" + r[7:] for r in rows(both)] == ["....x..|xx.", ".......|xxx", ".......|.xx"]
    assert [r[:7] + "|" + r[7:] for r in rows(left)] == ["....x..|xxx", ".......|xxx", ".......|.xx"]


@pytest.fixture(scope="module")
def drafters(test_bed, tmp_path_factory):
    root = tmp_path_factory.mktemp("engines")
    return {fmt: write_random_drafter(test_bed["qwen3"], root / fmt, fmt, block_size=4, num_layers=2, sliding_window=3,
                                      sliding_layers=1) for fmt in ("zlab", "speculators")}


def edited(src: Path, out: Path, edit) -> Path:
    shutil.copytree(src, out)
    cfg = json.loads((out / "config.json").read_text())
    edit(cfg)
    (out / "config.json").write_text(json.dumps(cfg))
    return out


def test_sglang_reads_rope_dim_else_a_top_level_partial_rotary_factor_only(drafters, tmp_path):
    """SGLang DFlashAttention.__init__ (transformers 5.19, its pin: a top-level partial_rotary_factor stays an
    attribute, one inside rope_parameters is not seen)."""
    top = read_spec(edited(drafters["zlab"], tmp_path / "top", lambda c: c.update(partial_rotary_factor=0.5)))[0]
    inner = read_spec(edited(drafters["zlab"], tmp_path / "inner",
                             lambda c: c["rope_parameters"].update(partial_rotary_factor=0.5)))[0]
    dim = read_spec(edited(drafters["zlab"], tmp_path / "dim", lambda c: c["rope_parameters"].update(rope_dim=8)))[0]
    assert top.partial_rotary_top_level and not inner.partial_rotary_top_level
    assert rotary_dim(top.rope, 16, "sglang", True) == 8 and rotary_dim(inner.rope, 16, "sglang", False) == 16
    assert rotary_dim(dim.rope, 16, "sglang") == 8 and rotary_dim(dim.rope, 16, "zlab") == 16
    assert rotary_dim(inner.rope, 16, "vllm") == 8  # vLLM moves either into rope_parameters
    served = apply_semantics(inner, "sglang", "test")
    assert any("declared in rope_parameters only, which SGLang does not read" in n for n in served.config_notes)
    assert any("rope_dim 8: ignored under zlab rules" in n for n in dim.config_notes)


def test_sglang_applies_no_logit_scales_to_a_dflash_drafter(drafters, tmp_path):
    """output_multiplier / final_logit_softcapping are applied by DFlash2DraftModel._transform_unary_logits only;
    input_embedding_scale is read nowhere in SGLang."""
    path = edited(drafters["zlab"], tmp_path / "scales", lambda c: c.update(input_embedding_scale=2.0,
                                                                           output_multiplier=0.5,
                                                                           final_logit_softcapping=30.0))
    spec = read_spec(path)[0]
    assert (spec.embedding_scale, spec.output_multiplier, spec.logit_softcap) == (2.0, 0.5, 30.0)
    served = apply_semantics(spec, "sglang", "test")
    assert (served.embedding_scale, served.output_multiplier, served.logit_softcap) == (1.0, 1.0, None)


@pytest.mark.parametrize("rules, edit, fmt, named", [
    ("sglang", None, "speculators", "SGLang 0.5.23 reads the z-lab layout only"),
    ("sglang", lambda c: c.update(use_sliding_window=False), "zlab",
     "SGLang raises 'DFLASH sliding_attention layers require config.sliding_window'"),
    ("llamacpp", lambda c: c.update(is_causal=True), "zlab", "the checkpoint declares is_causal; llama.cpp reads "
                                                              "dflash.attention.causal from the GGUF"),
    ("llamacpp", lambda c: c["dflash_config"].update(causal=False), "zlab", "declares dflash_config.causal"),
    ("llamacpp", lambda c: c.update(partial_rotary_factor=0.5), "zlab", "partial rotary: llama.cpp rotates "
                                                                        "rope.dimension_count dims"),
])
def test_what_cannot_be_reproduced_offline_is_refused_by_name(drafters, tmp_path, test_bed, rules, edit, fmt, named):
    path = drafters[fmt] if edit is None else edited(drafters[fmt], tmp_path / "x", edit)
    with pytest.raises(InputError, match=f"--semantics {rules}: .*{named}"):
        apply_semantics(read_spec(path)[0], rules, "test")
    result = runner.invoke(app, ["run", "-d", str(path), "--target", str(test_bed["qwen3"]), "--semantics", rules,
                                 "--out", str(tmp_path / "out")])
    assert result.exit_code == 2 and named.split(";")[0] in result.output and not (tmp_path / "out").exists()


def test_llamacpp_refuses_dflash2_and_both_engines_refuse_sampling(drafters, test_bed, tmp_path):
    spec = read_spec(drafters["zlab"])[0]
    dflash2 = replace(spec, conv_kernel_size=2, conv_group_size=16, selector_rank=8, selector_top_k=6)
    assert "CPU-side selector" in engine_rules.refusal(dflash2, "llamacpp")
    assert engine_rules.refusal(dflash2, "sglang") is None  # SGLang's walk starts from the anchor, as vLLM's
    for rules in ("sglang", "llamacpp"):
        result = runner.invoke(app, ["run", "-d", str(drafters["zlab"]), "--target", str(test_bed["qwen3"]),
                                     "--semantics", rules, "--temperature", "0.7", "--out", str(tmp_path / rules)])
        assert result.exit_code == 2 and "temperature > 0 is not modelled" in result.output


def test_doctor_variants_keep_their_three_rule_sets():
    assert VARIANT_SEMANTICS == ("zlab", "speculators", "vllm")


@pytest.fixture(scope="module")
def causal_fixture(test_bed, tmp_path_factory):
    """A z-lab drafter trained with sliding windows of 3 rows (causal in block, z-lab's default), whose config
    then declares dflash_config.causal = false and no is_causal: vLLM runs every layer bidirectional,
    SGLang (and z-lab) causal as trained."""
    from dflash_eval.demo.train import DEMO_PROMPTS, TrainConfig, greedy_sequences, train_drafter
    from dflash_eval.model.target import load_target

    target = load_target(str(test_bed["qwen3"]), device="cpu", dtype="float32")
    out = train_drafter(target, greedy_sequences(target, list(DEMO_PROMPTS), 40),
                        TrainConfig(block_size=4, steps=100, sliding_window=3, sliding_layers=2),
                        tmp_path_factory.mktemp("causal") / "causal-key", fmt="zlab")
    cfg = json.loads((out / "config.json").read_text())
    assert "is_causal" not in cfg
    cfg["dflash_config"]["causal"] = False
    (out / "config.json").write_text(json.dumps(cfg))
    return out


def test_doctor_engines_shows_the_vllm_sglang_split_and_names_the_causality_rule(causal_fixture, test_bed, tmp_path):
    result = runner.invoke(app, ["doctor", "--engines", "-d", str(causal_fixture), "--target", str(test_bed["qwen3"]),
                                 "--prompts", "demo", "--limit", "8", "--max-new-tokens", "40", "--cache-dir",
                                 str(tmp_path / "cache"), "--out", str(tmp_path / "doc")], env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    data = json.loads((tmp_path / "doc" / "engines.json").read_text())
    assert data["tap_passes"] == data["prompts"] == 8  # one target pass per prompt for every engine
    by = {row["engine"]: row for row in data["engines"]}
    assert by["sglang"]["differs"] == [] and by["sglang"]["tau_macro"] == data["base"]["tau_macro"]
    vllm = by["vllm"]
    assert vllm["differs"] == ["in-block causality", "final block"]
    assert vllm["tau_macro"] < by["sglang"]["tau_macro"] - 0.3, (vllm["tau_macro"], by["sglang"]["tau_macro"])
    assert vllm["delta"]["high"] < 0 and vllm["delta"]["p_value"] < 0.05
    causality = next(r for r in vllm["rules"] if r["rule"] == "in-block causality")
    assert causality["tau_macro"] == vllm["tau_macro"]  # the causality rule alone is the whole difference
    assert "in-block causality alone moves it" in vllm["responsible"]
    assert "dflash_config.causal" in by["llamacpp"]["refused"]
    pair = next(p for p in data["pairs"] if (p["a"], p["b"]) == ("vllm", "sglang"))
    assert pair["delta"]["low"] > 0
    assert "SGLang against vLLM: delta +" in result.stdout and "in-block causality alone" in result.stdout
