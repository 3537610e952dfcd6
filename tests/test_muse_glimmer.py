"""`muse_glimmer_assistant` checkpoints (Meta's MuseGlimmerAssistantModel) are read as the DFlash v1 drafter they
are: the checkpoint here is written by transformers' own `MuseGlimmerAssistantModel.save_pretrained` from a
z-lab drafter's weights. It drafts exactly what the same weights in z-lab format draft with the causality vLLM
0.33 injects for it (`dflash_config.causal = false`, read under vLLM's rules), and its logits are transformers'
own MuseGlimmerAssistantModel's (whose sliding mask admits one row more: |q - k| <= W)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from dflash_eval.cli import app

# z-lab/dflash tests/fixtures/assistant-config.json: the published Muse-Glimmer-30B-assistant config.json
MUSE_CONFIG = {
    "architectures": ["MuseGlimmerAssistantModel"], "attention_dropout": 0, "block_size": 16, "bos_token_id": 200000,
    "dtype": "bfloat16", "eos_token_id": 200001, "head_dim": 128, "hidden_act": "silu", "hidden_size": 6656,
    "intermediate_size": 19968, "layer_types": ["sliding_attention"] * 5, "mask_token_id": 201818,
    "max_position_embeddings": 131072, "model_type": "muse_glimmer_assistant", "num_attention_heads": 32,
    "num_hidden_layers": 5, "num_key_value_heads": 8, "pad_token_id": 200018, "rms_norm_eps": 1e-05,
    "rope_parameters": {"rope_theta": 500000.0, "rope_type": "default"}, "sliding_window": 2048,
    "target_layer_ids": [1, 13, 25, 37, 49], "transformers_version": "5.15.0.dev0"}
# its safetensors header (tests/fixtures/assistant-safetensors-header.json): 3 tensors + 11 per layer
MUSE_TENSORS = {"encoder.fc.weight": (6656, 33280), "encoder.output_norm_enc.weight": (6656,), "norm.weight": (6656,)}
PER_LAYER = {"input_layernorm.weight": (6656,), "post_attention_layernorm.weight": (6656,),
             "mlp.gate_proj.weight": (19968, 6656), "mlp.up_proj.weight": (19968, 6656),
             "mlp.down_proj.weight": (6656, 19968), "self_attn.q_proj.weight": (4096, 6656),
             "self_attn.k_proj.weight": (1024, 6656), "self_attn.v_proj.weight": (1024, 6656),
             "self_attn.o_proj.weight": (6656, 4096), "self_attn.q_norm.weight": (128,),
             "self_attn.k_norm.weight": (128,)}


def test_the_published_config_and_tensors_are_what_the_drafter_needs(tmp_path):
    from dflash_eval.formats import muse_glimmer
    from dflash_eval.formats.checkpoints import spec_from_zlab
    from dflash_eval.formats.files import TensorMeta
    from dflash_eval.formats.validation import first_failure, validate

    config, notes = muse_glimmer.zlab_config(MUSE_CONFIG, tmp_path / "config.json")
    assert config["dflash_config"] == {"causal": False, "block_size": 16, "mask_token_id": 201818,
                                       "target_layer_ids": [1, 13, 25, 37, 49]}
    assert (config["is_causal"], config["vocab_size"], config["sliding_window"]) == (False, 202048, 2048)
    assert any("vocab_size absent" in n for n in notes)  # the published config has none: z-lab's MLX default
    tensors = {**MUSE_TENSORS, **{f"layers.{i}.{k}": v for i in range(5) for k, v in PER_LAYER.items()}}
    weights = muse_glimmer.renamed({n: TensorMeta(shape, "BF16") for n, shape in tensors.items()})
    spec = muse_glimmer.finish_spec(spec_from_zlab(config, tmp_path, weights), notes)
    assert first_failure(validate(spec, weights, None)) is None  # every tensor named and shaped as ours
    assert spec.taps == (1, 13, 25, 37, 49) and spec.block_size == 16 and spec.layout == "muse_glimmer_assistant"
    assert [(x.kind, x.window, x.causal_in_block) for x in spec.layers] == [("sliding", 2048, False)] * 5
    from dflash_eval.core.semantics import apply_semantics  # each rule set reads the same declared keys its way

    vllm = apply_semantics(spec, "vllm", "test")
    assert [(x.window, x.causal_in_block, x.window_from) for x in vllm.layers] == [(2048, False, "query")] * 5
    speculators = apply_semantics(spec, "speculators", "test")  # reads neither is_causal nor dflash_config.causal
    assert [(x.window, x.causal_in_block, x.window_from) for x in speculators.layers] == [(2048, True, "anchor")] * 5
    assert speculators.layout == "muse_glimmer_assistant" and speculators.weight_renames == spec.weight_renames


@pytest.mark.parametrize("edit, message", [
    (lambda c: c.update(is_causal=True), "every reference runs this drafter bidirectional"),
    (lambda c: c.update(dflash_config={"block_size": 4}), "not part of the format"),
])
def test_keys_no_reference_reads_are_refused_by_name(tmp_path, edit, message):
    from dflash_eval.core.errors import InputError
    from dflash_eval.formats import muse_glimmer

    config = json.loads(json.dumps(MUSE_CONFIG))
    edit(config)
    with pytest.raises(InputError, match=message):
        muse_glimmer.zlab_config(config, tmp_path / "config.json")


@pytest.fixture(scope="module")
def muse(drafter_dirs, tmp_path_factory) -> dict[str, Path]:
    """The sliding test drafter (a window-3 sliding layer, causal in block under z-lab's rules, + a full one):
    written by transformers as muse_glimmer_assistant, and in z-lab format with vLLM's injected causality."""
    from dflash_eval.demo.checkpoint_writer import write_muse_glimmer

    root = tmp_path_factory.mktemp("muse")
    zlab = drafter_dirs["sliding"]
    causal_false = shutil.copytree(zlab, root / "zlab-causal-false")
    config = json.loads((causal_false / "config.json").read_text())
    config["dflash_config"]["causal"] = False  # what vLLM 0.33 injects for a MuseGlimmerAssistantModel
    (causal_false / "config.json").write_text(json.dumps(config))
    return {"muse": write_muse_glimmer(zlab, root / "muse"), "zlab-causal-false": causal_false, "zlab": zlab}


def test_same_walks_as_the_zlab_weights_with_vllms_causality(muse, test_bed, tmp_path):
    result = CliRunner().invoke(app, [
        "run", "--target", str(test_bed["qwen3"]), "-d", f"{muse['muse']}:muse", "-d", f"{muse['muse']}:muse_vllm",
        "-d", f"{muse['zlab-causal-false']}:zl_vllm", "-d", f"{muse['zlab']}:zl_causal",
        "--semantics", "muse_vllm=vllm", "--semantics", "zl_vllm=vllm", "--final-block", "full",  # vLLM's final block
        "--prompts", "demo", "--limit", "2",
        "--max-new-tokens", "24", "--no-thinking", "--out", str(tmp_path / "run"), "--cache-dir",
        str(tmp_path / "cache"), "--device", "cpu", "--no-html"])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in (tmp_path / "run" / "samples.jsonl").read_text().splitlines()]
    walks = {}
    for r in rows:
        walks.setdefault(r["drafter"], []).append((r["walk_anchors"], r["walk_accept_lengths"], r["walk_drafts"]))
    assert walks["muse"] == walks["zl_vllm"] == walks["muse_vllm"]
    assert walks["muse"] != walks["zl_causal"]  # the causality matters here: the comparison can fail
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    spec = next(d for d in run["drafters"] if d["name"] == "muse")["spec"]
    assert spec["layout"] == "muse_glimmer_assistant" and spec["semantics"] == "zlab"
    assert [layer["causal_in_block"] for layer in spec["layers"]] == [False, False]


def test_logits_are_transformers_own_muse_model(muse, test_bed):
    """transformers' MuseGlimmerAssistantModel run as its DFlash candidate generator runs it (a DFlashCache told
    how many context rows come, positions 0 .. a + B - 1, the target's embeddings of [anchor, MASK...]), then the
    target's lm_head: equal to dflash-eval's at every anchor once its window is one row shorter (its mask is
    |q - k| <= W, z-lab's and vLLM's q - k < W), and different at the same W (the rule is really tested)."""
    from transformers import MuseGlimmerAssistantModel
    from transformers.cache_utils import DFlashCache

    from dflash_eval.formats.checkpoints import checked_spec
    from dflash_eval.formats.files import weight_files
    from dflash_eval.model.drafter import load_drafter
    from dflash_eval.model.drafting import draft_logits
    from dflash_eval.model.target import capture_taps, load_target

    target = load_target(str(test_bed["qwen3"]), device="cpu", dtype="float32")
    spec, _ = checked_spec(muse["muse"], target.info)
    drafter = load_drafter(spec, weight_files(muse["muse"])).attach_target(target.embed_tokens, target.lm_head)
    tokens = torch.arange(3, 3 + 14) % spec.vocab_size
    taps = capture_taps(target, tokens, list(spec.taps)).taps
    B, anchors = spec.block_size, list(range(1, len(tokens)))
    ours = draft_logits(drafter, drafter.context(taps), tokens, anchors, [B] * len(anchors)).view(len(anchors), B, -1)

    def theirs(window: int) -> torch.Tensor:
        model = MuseGlimmerAssistantModel.from_pretrained(str(muse["muse"]), sliding_window=window).eval()
        out = []
        with torch.no_grad():
            for a in anchors:
                cache = DFlashCache(config=model.config)
                cache.set_previous_accepted_tokens(a)
                noise = target.embed_tokens(torch.tensor([[int(tokens[a])] + [spec.mask_token_id] * (B - 1)]))
                hidden = model(noise_embeds=noise, context_hidden_states=taps[:a][None],
                               position_ids=torch.arange(a + B)[None], cache=cache, use_cache=True).last_hidden_state
                out.append(target.lm_head(hidden)[0])
        return torch.stack(out)

    window = spec.layers[0].window
    assert torch.allclose(theirs(window - 1), ours, atol=1e-4, rtol=0)
    assert not torch.allclose(theirs(window), ours, atol=1e-4, rtol=0)
