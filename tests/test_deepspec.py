"""DeepSpec's DFlash drafters (deepseek-ai/dflash_qwen3_*_block7), the third checkpoint format: a test-bed drafter
written as DeepSpec writes one (its `build_draft_config` through transformers' `save_pretrained`, its tensor
names, the target's tables copied in) is read natively (formats/deepspec.py), drafts what DeepSpec's own forward
drafts (tests/reference_deepspec.py, its training forward and its evaluator's block alike), and gives the same
walks as its twin in another format.

The twin: DeepSpec's slot 0 drafts (a block of B predicts anchor + 1 .. anchor + B), which the z-lab layout
cannot say (z-lab's dflash/model.py reads slots 1..B-1 and has no key for it); the format that can is
speculators' (`sample_from_anchor: true`, speculators 0.9.0 models/dflash/core.py). So the twin of a DeepSpec
copy is that speculators checkpoint, and the z-lab original of the same weights drafts differently (which
shows the slot rule is really applied)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from reference_deepspec import DeepSpecDrafter, extract_context_feature
from typer.testing import CliRunner

from dflash_eval.cli import app


@pytest.fixture(scope="module")
def deepspec_pair(drafter_dirs, test_bed, tmp_path_factory) -> dict[str, Path]:
    """The z-lab test-bed drafter (B = 4, two full layers), its DeepSpec copy (DeepSpec block_size 4: slots 0..3
    draft) and the speculators twin of that copy (block_size 4, sample_from_anchor true)."""
    from safetensors.torch import load_file

    from dflash_eval.demo.checkpoint_writer import as_format, save_checkpoint, save_deepspec
    from dflash_eval.formats.checkpoints import read_spec
    from dflash_eval.testing.testbed import tiny_target_tables

    root = tmp_path_factory.mktemp("deepspec")
    zlab = drafter_dirs["zlab"]
    spec, _, _ = read_spec(zlab)
    state = load_file(str(zlab / "model.safetensors"))
    embed, head = tiny_target_tables(test_bed["qwen3"])
    copy = save_deepspec(root / "deepspec", spec, state, test_bed["qwen3"], target_embed=embed, target_lm_head=head)
    from dataclasses import replace

    twin_spec = replace(as_format(spec, "speculators"), sample_from_anchor=True, block_size=spec.block_size + 1)
    twin = save_checkpoint(root / "speculators-twin", twin_spec, state, "speculators", target_embed=embed,
                           target_lm_head=head, verifier=str(test_bed["qwen3"]))
    return {"zlab": zlab, "deepspec": copy, "twin": twin}


def test_the_copy_is_read_as_deepspec_wrote_it(deepspec_pair, test_bed):
    from dflash_eval.formats.checkpoints import checked_spec
    from dflash_eval.model.target import target_info

    config = json.loads((deepspec_pair["deepspec"] / "config.json").read_text())
    assert config["architectures"] == ["Qwen3DSparkModel"] and config["block_size"] == 4
    assert config["markov_rank"] == 0 and config["enable_confidence_head"] is False
    spec, _ = checked_spec(deepspec_pair["deepspec"], target_info(test_bed["qwen3"]))
    assert (spec.format, spec.semantics, spec.sample_from_anchor) == ("deepspec", "deepspec", True)
    assert (spec.block_size, spec.network_block_size) == (5, 4)  # 4 drafts per block, 1..5 tokens committed
    assert spec.taps == (1, 2, 3) and spec.embedding_source == spec.lm_head_source == "checkpoint"
    assert [(x.kind, x.causal_in_block) for x in spec.layers] == [("full", False)] * 2
    twin, _ = checked_spec(deepspec_pair["twin"], target_info(test_bed["qwen3"]))
    assert (twin.format, twin.block_size, twin.network_block_size, twin.sample_from_anchor) == ("speculators", 5, 4, True)


def test_logits_equal_deepspecs_own_forward(deepspec_pair, test_bed):
    """Every anchor's block, slot by slot: dflash-eval's slot j + 1 equals DeepSpec's slot j (its training forward
    with the anchors given, and its evaluator's one-block forward), fp32; taps as DeepSpec extracts them (HF
    hidden_states[id + 1]) for DeepSpec, our hooks for us."""
    from dflash_eval.formats.checkpoints import checked_spec
    from dflash_eval.formats.files import weight_files
    from dflash_eval.model.drafter import load_drafter
    from dflash_eval.model.drafting import draft_logits, draft_rows
    from dflash_eval.model.target import capture_taps, load_target

    target = load_target(str(test_bed["qwen3"]), device="cpu", dtype="float32")
    spec, _ = checked_spec(deepspec_pair["deepspec"], target.info)
    drafter = load_drafter(spec, weight_files(deepspec_pair["deepspec"])).attach_target(target.embed_tokens,
                                                                                          target.lm_head)
    tokens = (torch.arange(5, 5 + 18) * 7) % spec.vocab_size
    taps = capture_taps(target, tokens, list(spec.taps)).taps
    B, anchors = spec.block_size, list(range(2, len(tokens) - 1))
    ours = draft_logits(drafter, drafter.context(taps), tokens, anchors, [B] * len(anchors)).view(len(anchors), B, -1)

    oracle = DeepSpecDrafter(deepspec_pair["deepspec"])
    with torch.no_grad():
        hidden_states = target.model(tokens[None], output_hidden_states=True).hidden_states
    deepspec_taps = extract_context_feature(hidden_states, oracle.target_layer_ids)[0]
    assert torch.allclose(deepspec_taps, taps, atol=1e-5, rtol=0)  # the same numbering (none is the final layer)
    trained = oracle.training_logits(tokens, deepspec_taps, anchors)
    assert torch.allclose(ours[:, 1:], trained, atol=1e-4, rtol=0)
    for i, a in enumerate(anchors[::4]):
        assert torch.allclose(oracle.evaluator_logits(tokens, deepspec_taps, a), trained[4 * i], atol=1e-4, rtol=0)
    # the drafts of the replay are these argmaxes, slot 0 (the anchor) dropped: block_build_dspark_proposal's
    drafted = drafter.greedy_ids(draft_rows(drafter, drafter.context(taps), tokens, anchors, [B] * len(anchors)))
    assert torch.equal(drafted.view(len(anchors), B)[:, 1:], trained.argmax(-1))


def test_same_walks_as_its_speculators_twin_and_not_the_zlab_reading(deepspec_pair, test_bed, tmp_path):
    result = CliRunner().invoke(app, [
        "run", "--target", str(test_bed["qwen3"]), "-d", f"{deepspec_pair['deepspec']}:deepspec",
        "-d", f"{deepspec_pair['twin']}:twin", "-d", f"{deepspec_pair['zlab']}:zlab", "--final-block", "full",
        "--prompts", "demo", "--limit", "3", "--max-new-tokens", "24", "--no-thinking",
        "--out", str(tmp_path / "run"), "--cache-dir", str(tmp_path / "cache"), "--device", "cpu", "--no-html"])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in (tmp_path / "run" / "samples.jsonl").read_text().splitlines()]
    walks: dict[str, list] = {}
    for r in rows:
        walks.setdefault(r["drafter"], []).append((r["walk_anchors"], r["walk_accept_lengths"], r["walk_drafts"]))
    assert walks["deepspec"] == walks["twin"]
    assert all(len(drafts) == 4 for _, _, step in walks["deepspec"] for drafts in step)  # B drafts per step
    assert [s for _, _, d in walks["zlab"] for s in d] != [s for _, _, d in walks["deepspec"] for s in d]
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    spec = next(d for d in run["drafters"] if d["name"] == "deepspec")["spec"]
    assert (spec["format"], spec["block_size"], spec["sample_from_anchor"]) == ("deepspec", 5, True)


def test_the_live_loop_commits_what_the_replay_walks(deepspec_pair, test_bed, tmp_path):
    """The step-by-step loop (model/live.py) with a drafter whose slot 0 drafts: the same steps and drafts as the
    trajectory replay (the engine's invariant, for the new slot layout)."""
    walks = {}
    for mode in ("trajectory", "live"):
        result = CliRunner().invoke(app, [
            "run", "--target", str(test_bed["qwen3"]), "-d", f"{deepspec_pair['deepspec']}:deepspec",
            "--prompts", "demo", "--limit", "2", "--max-new-tokens", "20", "--no-thinking", "--mode", mode,
            "--out", str(tmp_path / mode), "--cache-dir", str(tmp_path / "cache"), "--device", "cpu", "--no-html"])
        assert result.exit_code == 0, result.output
        rows = [json.loads(line) for line in (tmp_path / mode / "samples.jsonl").read_text().splitlines()]
        walks[mode] = [(r["walk_anchors"], r["walk_accept_lengths"], r["walk_drafts"]) for r in rows]
    assert walks["live"] == walks["trajectory"]


def test_the_roofline_counts_the_network_slots(deepspec_pair):
    """plan's roofline: a DeepSpec block of 4 (5 slots as counted, slot 0 drafting) runs the 4 network slots the
    z-lab original runs: the same drafter FLOPs per block, the checkpoint's own tables read besides."""
    from dflash_eval.core.roofline import drafter_flops, drafter_shape

    deepspec = drafter_shape(json.loads((deepspec_pair["deepspec"] / "config.json").read_text()))
    zlab = drafter_shape(json.loads((deepspec_pair["zlab"] / "config.json").read_text()))
    assert (deepspec.format, deepspec.block_size, deepspec.anchor_drafts) == ("deepspec", 5, True)
    assert deepspec.network_slots() == zlab.network_slots() == 4 and deepspec.own_embedding
    assert drafter_flops(deepspec, 3, 100) == drafter_flops(zlab, 3, 100)


@pytest.mark.parametrize("architectures", [[[]], ["Qwen3DSparkModel", []], [{"name": "Qwen3DSparkModel"}]])
def test_architectures_that_are_not_names_are_refused_in_one_line(deepspec_pair, tmp_path, architectures):
    """Any JSON may stand in `architectures` (the fuzz test found a list inside it crashing the format detection
    with "unhashable type"): refused by name, exit 2, the config's path in the line."""
    import shutil

    copy = shutil.copytree(deepspec_pair["deepspec"], tmp_path / "odd")
    config = json.loads((copy / "config.json").read_text())
    (copy / "config.json").write_text(json.dumps({**config, "architectures": architectures}))
    result = CliRunner().invoke(app, ["inspect", str(copy)])
    assert result.exit_code == 2, result.output
    assert "architectures" in result.output and str(copy) in result.output.replace("\n", "")
