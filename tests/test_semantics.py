"""Reference rules per format: hand-computed masks, the per-layer rule table, and every config key either
reference reads honoured or refused by name (docs/config-keys.md lists them; the last test keeps the two
in step). The reference packages' own code is run in test_conformance.py."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import torch
from json_edits import DELETE, set_key
from typer.testing import CliRunner

from dflash_eval.cli import app
from dflash_eval.core.attention import AttentionConfig, LayerAttention
from dflash_eval.core.errors import InputError
from dflash_eval.core.semantics import layers_under
from dflash_eval.core.settings.run_settings import Scoring
from dflash_eval.formats.checkpoints import read_spec
from dflash_eval.model.masks import anchor_block_mask
from dflash_eval.testing.testbed import write_random_drafter

runner = CliRunner()
DOCS = Path(__file__).resolve().parents[1] / "docs" / "config-keys.md"


def rows(mask: torch.Tensor) -> list[str]:
    return ["".join("x" if v else "." for v in row) for row in mask.int().tolist()]


# Anchor a = 5, block of 3 slots, 7 context rows (0..6), window W = 2. Columns: context 0..6 | block 0..2.
@pytest.mark.parametrize("layer, expected", [
    # speculators: context a - W <= p < a = {3, 4}; no window inside the block
    (LayerAttention("sliding", 2, True, "anchor"), ["...xx..|x..", "...xx..|xx.", "...xx..|xxx"]),
    (LayerAttention("sliding", 2, False, "anchor"), ["...xx..|xxx", "...xx..|xxx", "...xx..|xxx"]),
    # z-lab: key k visible iff q - k < W with q = a + j; inside the block too, and k - q < W when bidirectional
    (LayerAttention("sliding", 2, True, "query"), ["....x..|x..", ".......|xx.", ".......|.xx"]),
    (LayerAttention("sliding", 2, False, "query"), ["....x..|xx.", ".......|xxx", ".......|.xx"]),
    # no window: every context row before the anchor
    (LayerAttention("full", None, False, "query"), ["xxxxx..|xxx"] * 3),
    (LayerAttention("full", None, True, "query"), ["xxxxx..|x..", "xxxxx..|xx.", "xxxxx..|xxx"]),
])
def test_masks_by_hand(layer, expected):
    mask = anchor_block_mask([5], [3], 7, layer)
    got = [r[:7] + "|" + r[7:] for r in rows(mask)]
    assert got == expected


def config(types, window=8, use=True, is_causal=None, non_causal=None, dflash_causal=None, fmt="zlab"):
    return AttentionConfig(layer_types=tuple(types), sliding_window=window if use else None, declared_window=window,
                           use_sliding_window=use, is_causal=is_causal, sliding_window_non_causal=non_causal,
                           dflash_causal=dflash_causal, format=fmt)


S, F = "sliding_attention", "full_attention"


def summary(layers):
    return [(la.kind, la.window, "causal" if la.causal_in_block else "bidir", la.window_from) for la in layers]


@pytest.mark.parametrize("rules, cfg, expected", [
    # z-lab (Qwen3DFlashAttention.__init__): sliding causal, full bidirectional; window from the query
    ("zlab", config([S, F]), [("sliding", 8, "causal", "query"), ("full", None, "bidir", "query")]),
    # a top-level is_causal sets every layer, full ones included
    ("zlab", config([S, F], is_causal=True), [("sliding", 8, "causal", "query"), ("full", None, "causal", "query")]),
    ("zlab", config([S, F], is_causal=False), [("sliding", 8, "bidir", "query"), ("full", None, "bidir", "query")]),
    # use_sliding_window false: no window, still causal
    ("zlab", config([S, F], use=False), [("sliding", None, "causal", "query"), ("full", None, "bidir", "query")]),
    # speculators: window from the anchor, is_causal not read, full always bidirectional
    ("speculators", config([S, F], is_causal=True, fmt="speculators"),
     [("sliding", 8, "causal", "anchor"), ("full", None, "bidir", "anchor")]),
    ("speculators", config([S, F], non_causal=True, fmt="speculators"),
     [("sliding", 8, "bidir", "anchor"), ("full", None, "bidir", "anchor")]),
    # no window: speculators gives the layer the full-attention mask (bidirectional)
    ("speculators", config([S, F], use=False, fmt="speculators"),
     [("sliding", None, "bidir", "anchor"), ("full", None, "bidir", "anchor")]),
    # vLLM: a speculators checkpoint gets one causality, not sliding_window_non_causal (absent: bidirectional)
    ("vllm", config([S, F], fmt="speculators"), [("sliding", 8, "bidir", "query"), ("full", None, "bidir", "query")]),
    ("vllm", config([S, F], non_causal=False, fmt="speculators"),
     [("sliding", 8, "causal", "query"), ("full", None, "causal", "query")]),
    ("vllm", config([S, F]), [("sliding", 8, "causal", "query"), ("full", None, "bidir", "query")]),
    ("vllm", config([S, F], dflash_causal=True), [("sliding", 8, "causal", "query"), ("full", None, "causal", "query")]),
])
def test_rules_per_reference(rules, cfg, expected):
    layers, why = layers_under(cfg, rules)
    assert summary(layers) == expected
    assert why.startswith({"zlab": "z-lab", "speculators": "speculators", "vllm": "vLLM"}[rules])


# -- config keys: honoured or refused by name -------------------------------------------------------


@pytest.fixture(scope="module")
def zlab_dir(test_bed, tmp_path_factory):
    return write_random_drafter(test_bed["qwen3"], tmp_path_factory.mktemp("k") / "zlab", "zlab", block_size=4,
                                num_layers=2, sliding_window=3, sliding_layers=1)


@pytest.fixture(scope="module")
def spec_dir(test_bed, tmp_path_factory):
    return write_random_drafter(test_bed["qwen3"], tmp_path_factory.mktemp("k") / "spec", "speculators", block_size=4,
                                num_layers=2, sliding_window=3, sliding_layers=1)


@pytest.fixture(scope="module")
def deepspec_dir(test_bed, tmp_path_factory):
    """A two-layer full-attention drafter written as DeepSpec writes one (testing/checkpoint_writer.save_deepspec)."""
    from dflash_eval.demo.checkpoint_writer import save_deepspec
    from dflash_eval.testing.testbed import random_state_dict, tiny_target_tables

    zlab = write_random_drafter(test_bed["qwen3"], tmp_path_factory.mktemp("k") / "dz", "zlab", block_size=4, num_layers=2)
    spec, _, _ = read_spec(zlab)
    embed, head = tiny_target_tables(test_bed["qwen3"])
    return save_deepspec(tmp_path_factory.mktemp("k") / "deepspec", spec, random_state_dict(spec, seed=5),
                         test_bed["qwen3"], target_embed=embed, target_lm_head=head)


FORMAT_DIRS = {"zlab": "zlab_dir", "speculators": "spec_dir", "deepspec": "deepspec_dir"}


def edited(src: Path, tmp_path: Path, edit) -> Path:
    out = tmp_path / src.name
    shutil.copytree(src, out)
    config = json.loads((out / "config.json").read_text())
    edit(config)
    (out / "config.json").write_text(json.dumps(config))
    return out



# key (as docs/config-keys.md names it), format, edit value, what the spec must show
HONOURED = [
    ("sliding_window", "zlab", 5, lambda s: s.layers[0].window == 5 and s.layers[0].window_from == "query"),
    ("use_sliding_window", "zlab", False, lambda s: s.layers[0].window is None and s.layers[0].causal_in_block),
    ("layer_types", "zlab", [F, S], lambda s: [la.kind for la in s.layers] == ["full", "sliding"]),
    ("is_causal", "zlab", True, lambda s: all(la.causal_in_block for la in s.layers)),
    ("input_embedding_scale", "zlab", 1.5, lambda s: s.embedding_scale == 1.5),
    ("dflash_config.input_embedding_scale", "zlab", 2.0, lambda s: s.embedding_scale == 2.0),
    ("output_multiplier", "zlab", 0.5, lambda s: s.output_multiplier == 0.5),
    ("final_logit_softcapping", "zlab", 30.0, lambda s: s.logit_softcap == 30.0),
    ("dflash_config.target_layer_ids", "zlab", [0, 2, 3], lambda s: s.taps == (0, 2, 3)),
    ("target_layer_ids", "zlab", [0, 1, 2], lambda s: s.taps == (1, 2, 3)),  # dflash_config's wins (_draft_value)
    ("dflash_config.block_size", "zlab", 6, lambda s: s.block_size == 6),
    ("sliding_window_non_causal", "speculators", True, lambda s: not s.layers[0].causal_in_block),
    ("transformer_layer_config.use_sliding_window", "speculators", False,
     lambda s: s.layers[0].window is None and not s.layers[0].causal_in_block),
    ("transformer_layer_config.sliding_window", "speculators", 7, lambda s: s.layers[0].window == 7),
    ("transformer_layer_config.input_embedding_scale", "speculators", 1.5,
     lambda s: s.embedding_scale == 1.0 and s.scales.input_embedding_scale == 1.5 and s.config_notes),
    # slot 0 drafts: a block of 4 drafts 4 tokens, read as B = 5 (core/spec.py)
    ("sample_from_anchor", "speculators", True,
     lambda s: s.sample_from_anchor and (s.block_size, s.network_block_size) == (5, 4)),
    ("block_size", "deepspec", 6, lambda s: (s.block_size, s.network_block_size, s.sample_from_anchor) == (7, 6, True)),
    ("target_layer_ids", "deepspec", [0, 2, 4], lambda s: s.taps == (0, 2, 4)),
    ("mask_token_id", "deepspec", 7, lambda s: s.mask_token_id == 7),
    ("num_target_layers", "deepspec", 12, lambda s: s.num_target_layers == 12),
    ("num_anchors", "deepspec", 256, lambda s: any("num_anchors=256" in n for n in s.config_notes)),
    ("markov_rank", "deepspec", 0, lambda s: s.format == "deepspec"),
    ("enable_confidence_head", "deepspec", False, lambda s: s.format == "deepspec"),
]


@pytest.mark.parametrize("key, fmt, value, check", HONOURED, ids=[f"{f}:{k}" for k, f, _, _ in HONOURED])
def test_config_key_is_honoured(key, fmt, value, check, request, tmp_path):
    folder = edited(request.getfixturevalue(FORMAT_DIRS[fmt]), tmp_path, set_key(key, value))
    spec, _, _ = read_spec(folder)
    assert check(spec), spec


def test_zlab_defaults_when_keys_are_absent(zlab_dir, tmp_path):
    """z-lab's code has a default tap rule (noted, and said as a warning by every command: inputs.assumed_defaults),
    but no default block size: DFlashDraftModel reads `config.block_size` (issue 49 C)."""
    def edit(config):
        config["dflash_config"].pop("target_layer_ids")
        config["num_target_layers"] = 36
        config["num_hidden_layers"] = 2
    folder = edited(zlab_dir, tmp_path / "taps", edit)
    spec, _, _ = read_spec(folder)
    assert spec.taps == (1, 33)  # z-lab's build_target_layer_ids(36, 2)
    from dflash_eval.pipeline.inputs import DrafterEntry, assumed_defaults

    assert assumed_defaults([DrafterEntry("d", folder, spec)]) == [
        "drafter d: target_layer_ids absent: z-lab's default rule gives [1, 33] assumed"]  # a run's warning

    def no_block(config):
        config["dflash_config"].pop("block_size")
        config.pop("block_size", None)
    with pytest.raises(InputError, match="'dflash_config.block_size' is missing: z-lab's DFlashDraftModel has no "
                                         "default block size"):
        read_spec(edited(zlab_dir, tmp_path / "block", no_block))


def test_other_deepspec_models_are_refused_by_name(deepspec_dir, tmp_path):
    for arch in ("Gemma4DSparkModel", "Qwen3Eagle3Model"):
        with pytest.raises(InputError, match=f"'architectures'='{arch}'"):
            read_spec(edited(deepspec_dir, tmp_path / arch, set_key("architectures", [arch])))


REFUSED = [
    ("conv_kernel_size", "zlab", 4), ("dflash_config.conv_group_size", "zlab", 8), ("selector_rank", "zlab", 8),
    ("dflash_config.selector_top_k", "zlab", 8), ("dflash_config.use_swa", "zlab", True),
    ("attention_sinks", "zlab", True), ("dflash_config.causal_unknown_switch", "zlab", 1),
    ("transformer_layer_config.conv_kernel_size", "speculators", 4),
    ("transformer_layer_config.model_type", "speculators", "llama"),
    ("sample_from_anchor", "speculators", "yes"), ("layer_types", "zlab", ["chunked_attention", F]),
    ("sliding_window", "zlab", -3), ("is_causal", "zlab", "yes"), ("input_embedding_scale", "zlab", "big"),
    # DeepSpec (formats/deepspec.py): DSpark's heads, its evaluator's tap rules, another format's keys
    ("markov_rank", "deepspec", 4), ("markov_head_type", "deepspec", "vanilla"),
    ("enable_confidence_head", "deepspec", True), ("confidence_head_with_markov", "deepspec", True),
    ("target_layer_ids", "deepspec", [1, 5]), ("target_layer_ids", "deepspec", [-1, 2]),
    ("target_layer_ids", "deepspec", [3, 1]), ("layer_types", "deepspec", [S, F]),
    ("tie_word_embeddings", "deepspec", True), ("dflash_config", "deepspec", {"block_size": 4}),
    ("sample_from_anchor", "deepspec", True), ("is_causal", "deepspec", False), ("block_size", "deepspec", DELETE),
    ("model_type", "deepspec", "llama"),
]


@pytest.mark.parametrize("key, fmt, value", REFUSED, ids=[f"{f}:{k}" for k, f, _ in REFUSED])
def test_config_key_is_refused_by_name(key, fmt, value, request, tmp_path):
    folder = edited(request.getfixturevalue(FORMAT_DIRS[fmt]), tmp_path, set_key(key, value))
    with pytest.raises(InputError) as error:
        read_spec(folder)
    assert key.split(".")[-1] in str(error.value) and "config.json" in str(error.value)


def test_architecture_dflash2_is_refused(zlab_dir, tmp_path):
    folder = edited(zlab_dir, tmp_path, set_key("architectures", ["DFlash2DraftModel"]))
    with pytest.raises(InputError, match="DFlash2"):
        read_spec(folder)


def test_docs_table_lists_every_tested_key():
    """docs/config-keys.md is the user's table; every key tested here appears in it and vice versa."""
    text = DOCS.read_text()
    documented = set(re.findall(r"^\| `([^`]+)`", text, flags=re.M))
    tested = {k.split(".")[-1] for k, *_ in HONOURED} | {k.split(".")[-1] for k, *_ in REFUSED}
    tested -= {"causal_unknown_switch", "architectures"}
    assert tested <= documented, tested - documented


# -- the drafts change where the rules say they do ---------------------------------------------------


def test_embedding_scale_changes_the_drafts_and_multiplier_scales_logits(zlab_dir, test_bed, tmp_path):
    from dflash_eval.formats.checkpoints import checked_spec
    from dflash_eval.formats.files import weight_files
    from dflash_eval.model.drafter import load_drafter
    from dflash_eval.model.drafting import draft_logits
    from dflash_eval.model.target import capture_taps, load_target

    target = load_target(str(test_bed["qwen3"]), device="cpu", dtype="float32")
    tokens = torch.tensor(target.tokenizer("def add(a, b):\n    return a + b\n")["input_ids"])

    def logits(folder):
        spec, _ = checked_spec(folder, target.info)
        drafter = load_drafter(spec, weight_files(folder)).attach_target(target.embed_tokens, target.lm_head)
        ctx = drafter.context(capture_taps(target, tokens, list(spec.taps)).taps)
        return draft_logits(drafter, ctx, tokens, [3, 6], [4, 4])

    base = logits(zlab_dir)
    scaled = logits(edited(zlab_dir, tmp_path / "a", set_key("input_embedding_scale", 3.0)))
    assert (scaled - base).abs().max() > 1e-2
    doubled = logits(edited(zlab_dir, tmp_path / "b", set_key("output_multiplier", 2.0)))
    assert torch.allclose(doubled, 2 * base, atol=1e-5)
    capped = logits(edited(zlab_dir, tmp_path / "c", set_key("final_logit_softcapping", 0.5)))
    assert capped.abs().max() <= 0.5 + 1e-6 and torch.equal(capped.argmax(-1), base.argmax(-1))


# -- inspect, run and doctor say which rules they applied --------------------------------------------


def test_inspect_prints_the_rule_of_every_layer_and_its_source(test_bed, tmp_path):
    design = dict(block_size=4, num_layers=5, sliding_window=2048, sliding_layers=4)
    zlab = write_random_drafter(test_bed["qwen3"], tmp_path / "z", "zlab", **design)
    spec_fmt = write_random_drafter(test_bed["qwen3"], tmp_path / "s", "speculators", **design)
    z = runner.invoke(app, ["inspect", str(zlab)], env={"COLUMNS": "240"})
    assert z.exit_code == 0, z.output
    assert z.stdout.count("window 2048 from the query (q - k < 2048, in block too), causal in block") == 4
    assert "full attention, no window, bidirectional in block" in z.stdout
    assert "dflash/model.py" in z.stdout and "format default (zlab checkpoint)" in z.stdout
    s = runner.invoke(app, ["inspect", str(spec_fmt)], env={"COLUMNS": "240"})
    assert s.exit_code == 0, s.output
    assert s.stdout.count("window 2048 from the anchor (a - 2048 <= p < a), causal in block") == 4
    assert "create_anchor_block_mask_mod" in s.stdout
    over = runner.invoke(app, ["inspect", str(spec_fmt), "--semantics", "zlab"], env={"COLUMNS": "240"})
    assert "override: --semantics zlab" in over.stdout and "from the query" in over.stdout
    bad = runner.invoke(app, ["inspect", str(spec_fmt), "--semantics", "mine"])
    assert bad.exit_code == 2 and "unknown rules" in bad.stderr


def test_run_records_the_rules_and_overrides_by_name(trained, tmp_path):
    good = trained["qwen3"]["good"]
    base = ["run", "-d", f"{good}:a", "-d", f"{good}:b", "-d", f"{good}:c", "--target", str(trained["qwen3"]["target"]),
            "--max-new-tokens", "16", "--limit", "2", "--device", "cpu", "--cache-dir", str(tmp_path / "c"), "--no-html"]
    result = runner.invoke(app, [*base, "--out", str(tmp_path / "r"), "--semantics", "b=zlab", "--semantics", "c=vllm"])
    assert result.exit_code == 0, result.output
    run = json.loads((tmp_path / "r" / "run.json").read_text())
    spec = {d["name"]: d["spec"] for d in run["drafters"]}
    assert spec["a"]["semantics"] == "speculators" and spec["a"]["semantics_source"].startswith("format default")
    assert spec["b"]["semantics"] == "zlab" and spec["b"]["semantics_source"] == "override: --semantics zlab"
    taus = {d["name"]: d["metrics"]["tau_macro"] for d in run["drafters"]}
    assert taus["b"] < taus["a"]  # one-row windows from the query see no context
    # the walk each drafter used near the length cap: vLLM never shortens the final block
    assert run["provenance"]["final_block"] == "shorter"
    assert run["provenance"]["final_block_by_drafter"] == {"a": "shorter", "b": "shorter", "c": "full"}
    unknown = runner.invoke(app, [*base, "--out", str(tmp_path / "x"), "--semantics", "d=zlab"])
    assert unknown.exit_code == 2 and "no drafter named 'd'" in unknown.stderr
    assert not (tmp_path / "x").exists()


# ---------------------------------------------------------------- vLLM's serving rules (VLLM_SERVING_RULES)

@pytest.fixture(scope="module")
def vllm_pair(drafter_dirs, test_bed):
    """The random z-lab drafter (full layers, bidirectional in the block: the block's length changes its
    drafts) read under z-lab's rules and under vLLM's, which give it the same attention; taps and final
    hidden states of one target pass over a short text."""
    from dflash_eval.core.semantics import apply_semantics
    from dflash_eval.formats.checkpoints import checked_spec
    from dflash_eval.formats.files import weight_files
    from dflash_eval.model.drafter import load_drafter
    from dflash_eval.model.target import capture_taps, load_target

    target = load_target(str(test_bed["qwen3"]), device="cpu", dtype="float32")
    spec, _ = checked_spec(drafter_dirs["zlab"], target.info)
    drafter = load_drafter(spec, weight_files(drafter_dirs["zlab"])).attach_target(target.embed_tokens, target.lm_head)
    vllm = apply_semantics(spec, "vllm", "test")
    assert vllm.layers == spec.layers and spec.semantics == "zlab"
    tokens = torch.arange(3, 23)
    capture = capture_taps(target, tokens, list(spec.taps), keep_hidden=True)
    return target, drafter, spec, vllm, tokens, capture


def _replay(drafter, spec, capture, tokens, shorter):
    from dflash_eval.model.engine import replay

    drafter.spec = spec
    return replay(drafter, capture.taps, tokens, 4, Scoring(16, "shorter" if shorter else "full", anchor_batch=64))


def test_vllm_drafts_full_blocks_up_to_the_length_cap(vllm_pair):
    """vLLM's DFlash proposer always queries 1 + num_speculative_tokens slots and its scheduler trims drafts
    only at max_model_len: the block near the cap stays full, whatever --final-block says."""
    from dflash_eval.core.semantics import VLLM_NOTE, shorter_final_block

    _, drafter, zlab, vllm, tokens, capture = vllm_pair
    assert shorter_final_block("vllm", True) is False and shorter_final_block("zlab", True) is True
    short, full = (_replay(drafter, zlab, capture, tokens, s) for s in (True, False))
    served = _replay(drafter, vllm, capture, tokens, True)  # asked for the shorter block: vLLM's rule wins
    drafter.spec = zlab
    assert short.block_lengths[-3:] == [4, 3, 2] and served.block_lengths == full.block_lengths == [4] * 15
    assert served.drafts == full.drafts and served.drafts[-3:] != short.drafts[-3:]  # the bidirectional block
    assert VLLM_NOTE in vllm.config_notes and VLLM_NOTE not in zlab.config_notes


def test_vllm_probabilistic_drafts_ignore_top_p_and_greedy_drafts_are_argmax(vllm_pair):
    """vLLM's draft_sample_method: greedy (default) = --draft-policy argmax under both rules; probabilistic
    = --draft-policy sample with q = softmax(logits / T), no top-p: the estimate changes only with top-p."""
    from dflash_eval.model.estimation import anchor_alphas
    from dflash_eval.model.sampling import Sampling

    target, drafter, zlab, vllm, tokens, capture = vllm_pair

    def alphas(spec, sampling):
        drafter.spec = spec
        try:
            return anchor_alphas(drafter, capture.taps, tokens, capture.hidden, target.lm_head, 4, Scoring(16, "full"), sampling)
        finally:
            drafter.spec = zlab

    for sampling in (Sampling(0.8, 1.0, 0, "sample"), Sampling(0.8, 0.5, 0, "argmax")):
        assert alphas(vllm, sampling) == alphas(zlab, sampling)
    nucleus = Sampling(0.8, 0.5, 0, "sample")
    served, zlab_rule = alphas(vllm, nucleus), alphas(zlab, nucleus)
    assert served != zlab_rule
    # by hand for one slot: sum_x min(p_top-p(x), softmax(logits / T)(x))
    from dflash_eval.model.drafting import draft_logits
    from dflash_eval.model.sampling import sampling_probs

    logits = draft_logits(drafter, drafter.context(capture.taps), tokens, [4], [4])
    p = sampling_probs(target.lm_head(capture.hidden[4:5]), nucleus)
    q = torch.softmax(logits[1:2].float() / 0.8, -1)
    assert served[0][0] == pytest.approx(float(torch.minimum(p, q).sum()), abs=1e-6)
