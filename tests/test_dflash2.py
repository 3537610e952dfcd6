"""DFlash2: reading both layouts, the forward and the candidate selector against speculators 0.9.0's own
modules, the serving walk against hand-computed cases and a transcription of vLLM 0.33's walk, and the walk
as the draft rule in the replay and the live loop.

References (read in the packages): speculators 0.9.0 `models/dflash2/{config,core,model_definitions}.py`
(run here, fp32 CPU); vLLM 0.33.0 `model_executor/models/qwen3_dflash2.py` (`_score_edges`) and
`v1/worker/gpu/spec_decode/dflash2/speculator.py` (`_selector_walk_kernel`), transcribed below in plain
PyTorch (vLLM is never installed).
"""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
import reference_code as ref
import torch

from dflash_eval.core.errors import InputError
from dflash_eval.core.settings.run_settings import Scoring
from dflash_eval.demo.checkpoint_writer import design_spec, save_checkpoint
from dflash_eval.formats.checkpoints import checked_spec, read_spec
from dflash_eval.formats.files import weight_files
from dflash_eval.model.dflash2 import candidate_probs, candidates, edge_scores, grouped_causal_conv, serving_walk
from dflash_eval.model.drafter import load_drafter
from dflash_eval.model.drafting import draft_hidden, draft_logits
from dflash_eval.model.engine import replay
from dflash_eval.model.live import live_generate
from dflash_eval.model.target import capture_taps, load_target, target_info
from dflash_eval.testing.testbed import random_state_dict

DFLASH2 = dict(conv_kernel_size=2, conv_group_size=16, selector_rank=8, selector_top_k=6)
TOL = 1e-4


def _dflash2_state(spec, seed: int) -> dict[str, torch.Tensor]:
    """Random weights; the convolutions near identity (base tap 0 = 1 + noise) so the blocks carry signal."""
    state = random_state_dict(spec, seed)
    for name in state:
        if name.endswith("base_kernel"):
            state[name][:, 0] += 1.0
        if "codebook" in name:
            state[name] = state[name] * 20  # a low-rank term large enough to reorder candidates
    return state


@pytest.fixture(scope="module")
def target_dir(test_bed) -> Path:
    return test_bed["qwen3"]


@pytest.fixture(scope="module")
def target(target_dir):
    return load_target(str(target_dir), device="cpu", dtype="float32")


@pytest.fixture(scope="module")
def layouts(target_dir, tmp_path_factory) -> dict[str, Path]:
    """The same random DFlash2 weights in speculators' layout and in the layout vLLM serves."""
    from transformers import AutoTokenizer

    info = target_info(target_dir)
    mask = AutoTokenizer.from_pretrained(target_dir, local_files_only=True).convert_tokens_to_ids("<|mask|>")
    root = tmp_path_factory.mktemp("dflash2")
    out = {}
    for fmt, name in (("speculators", "speculators"), ("zlab", "vllm")):
        spec = replace(design_spec(info, mask_token_id=mask, block_size=4, num_layers=2, fmt=fmt), **DFLASH2)
        out[name] = save_checkpoint(root / name, spec, _dflash2_state(spec, seed=5), fmt, verifier=str(target_dir))
    return out


def _edit(source: Path, out: Path, edit) -> Path:
    shutil.copytree(source, out)
    config = json.loads((out / "config.json").read_text())
    edit(config)
    (out / "config.json").write_text(json.dumps(config))
    return out


def _loaded(path: Path, target):
    spec, _ = checked_spec(path, target.info)
    return load_drafter(spec, weight_files(path)).attach_target(target.embed_tokens, target.lm_head)


# -- reading -----------------------------------------------------------------------------------------


def test_both_layouts_read_to_the_same_dflash2_spec(layouts, target):
    specs = {name: checked_spec(path, target.info)[0] for name, path in layouts.items()}
    for name, spec in specs.items():
        assert spec.is_dflash2 and (spec.conv_kernel_size, spec.conv_group_size, spec.selector_rank,
                                    spec.selector_top_k) == (2, 16, 8, 6), name
        assert spec.embedding_source == spec.lm_head_source == "target"  # speculators 0.9.0 saves neither
    assert specs["vllm"].semantics == "vllm" and specs["speculators"].semantics == "speculators"
    names = set(json.loads((layouts["speculators"] / "config.json").read_text()))
    assert "embed_tokens.weight" not in names


def test_speculators_defaults_are_dflash2s(layouts, tmp_path):
    def drop(config):
        for key in (*DFLASH2, "sliding_window_non_causal"):
            config.pop(key)
    spec, _, _ = read_spec(_edit(layouts["speculators"], tmp_path / "d", drop))
    assert (spec.conv_kernel_size, spec.conv_group_size, spec.selector_rank, spec.selector_top_k) == (2, 16, 256, 16)
    assert spec.attention_config.sliding_window_non_causal is True
    assert any("DFlash2SpeculatorConfig's default" in note for note in spec.config_notes)


def test_vllm_layout_scales_are_applied_under_every_rule_set(layouts, tmp_path):
    from dflash_eval.core.semantics import apply_semantics

    def scales(config):
        config["dflash_config"].update(input_embedding_scale=2.0, output_multiplier=0.5, final_logit_softcapping=30.0)
    spec, _, _ = read_spec(_edit(layouts["vllm"], tmp_path / "s", scales))
    for rules in ("vllm", "speculators", "zlab"):
        other = apply_semantics(spec, rules, "test")
        assert (other.embedding_scale, other.output_multiplier, other.logit_softcap) == (2.0, 0.5, 30.0)


BAD = [
    ("vllm", lambda c: c["dflash_config"].pop("selector_top_k"), "dflash_config.selector_top_k"),
    ("vllm", lambda c: c["dflash_config"].update(conv_group_size=7), "conv_group_size"),
    ("vllm", lambda c: c["dflash_config"].update(conv_kernel_size=5), "conv_kernel_size"),
    ("vllm", lambda c: c["dflash_config"].update(selector_rank=0), "selector_rank"),
    ("vllm", lambda c: c.update(output_multiplier=2.0), "output_multiplier"),
    ("vllm", lambda c: c["dflash_config"].update(sample_from_anchor=True), "sample_from_anchor"),
    ("vllm", lambda c: c["dflash_config"].update(use_swa=True), "use_swa"),
    ("speculators", lambda c: c.update(selector_top_k=10 ** 7), "selector_top_k"),
    ("speculators", lambda c: c.update(selector_rank="8"), "selector_rank"),
    ("speculators", lambda c: c.update(draft_vocab_size=100), "draft_vocab_size"),
    ("speculators", lambda c: c.update(speculators_model_type="dspark"), "dspark"),
    ("speculators", lambda c: c.update(speculators_model_type="xpress"), "xpress"),
    ("speculators", lambda c: c.update(speculators_model_type="eagle3"), "eagle3"),
]


@pytest.mark.parametrize("layout, edit, named", BAD, ids=[f"{layout}:{n}" for layout, _, n in BAD])
def test_bad_dflash2_configs_are_refused_by_name(layouts, tmp_path, layout, edit, named):
    with pytest.raises(InputError) as error:
        read_spec(_edit(layouts[layout], tmp_path / "bad", edit))
    assert named in str(error.value) and "config.json" in str(error.value)


def test_dflash2_weights_are_validated(layouts, target, tmp_path):
    from safetensors.torch import load_file, save_file

    for change, named in ((lambda s: s.pop("layers.1.mlp_conv.base_kernel"), "weights present"),
                          (lambda s: s.update({"candidate_selector.successor_codebook":
                                               s["candidate_selector.successor_codebook"][:, :4].contiguous()}),
                           "candidate_selector.successor_codebook")):
        folder = tmp_path / named.replace(" ", "_")
        shutil.copytree(layouts["vllm"], folder)
        state = load_file(str(folder / "model.safetensors"))
        change(state)
        save_file(state, str(folder / "model.safetensors"))
        with pytest.raises(InputError, match=named):
            checked_spec(folder, target.info)


# -- conformance with speculators 0.9.0's own modules ------------------------------------------------


def _speculators_dflash2(path: Path):
    core = ref.require("speculators.models.dflash2.core")
    config = core.DFlash2SpeculatorConfig.from_pretrained(str(path))
    config.transformer_layer_config._attn_implementation = ref.SPECULATORS_ATTN
    return core.DFlash2DraftModel.from_pretrained(str(path), config=config, dtype=torch.float32).float().eval()


@torch.inference_mode()
def test_convolution_outputs_equal_speculators(layouts):
    theirs = _speculators_dflash2(layouts["speculators"])
    conv = theirs.layers[0].attention_conv
    B, H = 4, conv.base_kernel.shape[-1]
    x = torch.randn(5 * B, H, generator=torch.Generator().manual_seed(0))
    their_in, their_delta = conv.prepare(x[None])
    their_out = conv.finish(x[None] * 0.5, their_delta)
    kernels = conv.kernel_projection(x).view(5, B, 2, conv.kernel_size, conv.num_groups)
    ours_in = grouped_causal_conv(x.view(5, B, H), kernels[:, :, 0], conv.base_kernel[0], conv.group_size)
    ours_out = grouped_causal_conv(x.view(5, B, H) * 0.5, kernels[:, :, 1], conv.base_kernel[1], conv.group_size)
    assert torch.allclose(ours_in.reshape(-1, H), their_in[0], atol=1e-6)
    assert torch.allclose(ours_out.reshape(-1, H), their_out[0], atol=1e-6)


@torch.inference_mode()
def test_unary_logits_and_candidate_scores_equal_speculators(layouts, target):
    core = ref.require("speculators.models.dflash.core")  # `_backbone_forward` (inherited) draws anchors there
    theirs = _speculators_dflash2(layouts["speculators"])
    ours = _loaded(layouts["speculators"], target)
    ids = target.tokenizer("def add(a, b):\n    return a + b\nprint(add(1, 2))")["input_ids"]
    taps = ref.speculators_taps(target.model, ids, list(ours.spec.speculators_taps))
    anchors = list(range(2, len(ids) - 1))
    B = theirs.block_size
    T = len(ids)
    hidden_in = torch.cat([taps, torch.zeros(B, taps.shape[1])])[None]
    tokens = torch.tensor([ids + [0] * B])
    with ref._fixed_anchors(core, anchors):
        their_hidden, their_logits, _, _, block_indices = theirs._backbone_forward(
            hidden_in, tokens, torch.tensor([[1] * T + [0] * B]), torch.zeros(1, T + B, target.info.hidden_size),
            torch.tensor([[0] * T + [-1] * B]), max_anchors=len(anchors))
    ctx = ours.context(capture_taps(target, torch.tensor(ids), list(ours.spec.taps)).taps)
    our_logits = draft_logits(ours, ctx, torch.tensor(ids), anchors, [B] * len(anchors))
    assert torch.allclose(our_logits, their_logits[0], atol=TOL), (our_logits - their_logits[0]).abs().max()
    # candidate scores for given predecessors: speculators' teacher-forced ones (its `_predecessor_ids`)
    hidden, _ = draft_hidden(ours, ctx, torch.tensor(ids), anchors, [B] * len(anchors))
    predecessors = theirs._predecessor_ids(tokens, block_indices).reshape(1, -1)
    their_ids = their_logits.topk(theirs.candidate_selector.top_k, dim=-1).indices
    their_scores = theirs.candidate_selector.score_candidates(their_logits, their_hidden, predecessors, their_ids)
    our_ids, unary = candidates(ours, hidden.reshape(1, -1, hidden.shape[-1]))
    edge = ours.candidate_selector.transition(hidden.reshape(1, -1, hidden.shape[-1]), predecessors[..., None], our_ids)
    assert torch.equal(our_ids, their_ids)
    assert torch.allclose(unary + edge[..., 0, :], their_scores, atol=TOL)


# -- the walk ----------------------------------------------------------------------------------------


def test_walk_on_hand_computed_cases():
    # one block, 2 slots, K = 2. Slot 1 (anchor row): scores [1, 3] -> candidate 1 (id 11).
    # Slot 2 reads row 1 (the candidate chosen before): [5, 0] -> candidate 0 (id 20), although row 0
    # (the other predecessor) prefers candidate 1 and the unary order might too.
    ids = torch.tensor([[[10, 11], [20, 21]]])
    scores = torch.tensor([[[[1.0, 3.0], [1.0, 3.0]], [[0.0, 9.0], [5.0, 0.0]]]])
    tokens, realized = serving_walk(ids, scores)
    assert tokens.tolist() == [[11, 20]] and realized.tolist() == [[[1.0, 3.0], [5.0, 0.0]]]
    # ties go to the first candidate (the higher unary rank), as an argmax over the candidates in order
    tokens, _ = serving_walk(ids, torch.zeros(1, 2, 2, 2))
    assert tokens.tolist() == [[10, 20]]
    # T > 0: the draft distribution is softmax(realized row / T) on the candidates, 0 elsewhere
    q = candidate_probs(torch.tensor([[2, 0]]), torch.tensor([[0.0, 2.0 * 0.5]]), 0.5, 4)
    expected = torch.tensor([1.0, torch.e ** 2]) / (1 + torch.e ** 2)
    assert torch.allclose(q[0], torch.tensor([expected[1], 0.0, expected[0], 0.0]))


def _vllm_score_edges(pred_table, succ_table, candidate_ids, unary, hidden, anchor_ids, top_k):
    """vLLM 0.33 `_score_edges`, transcribed: unary[:, :, None] + einsum('blpr,blcr->blpc', P * h, S)."""
    successors = succ_table[candidate_ids]
    predecessor_ids = torch.cat((anchor_ids[:, None, None].expand(-1, 1, top_k), candidate_ids[:, :-1]), dim=1)
    predecessors = pred_table[predecessor_ids]
    return unary[:, :, None] + torch.einsum("blpr,blcr->blpc", predecessors * hidden[:, :, None], successors)


def _vllm_walk(scores, candidates_, top_k):
    """vLLM 0.33 `_selector_walk_kernel` at temperature 0, transcribed over flat buffers: per request row,
    `previous = 0`, then per step the scores at ((row * steps + step) * K + previous) * K, argmax, token."""
    num_reqs, steps = candidates_.shape[:2]
    flat_scores, flat_cands = scores.reshape(-1), candidates_.reshape(-1)
    out = torch.zeros(num_reqs, steps, dtype=torch.long)
    for row in range(num_reqs):
        previous = 0
        for step in range(steps):
            flat = row * steps + step
            base = (flat * top_k + previous) * top_k
            index = int(torch.argmax(flat_scores[base:base + top_k]))
            out[row, step] = flat_cands[flat * top_k + index]
            previous = index
    return out


@torch.inference_mode()
def test_walk_equals_a_transcription_of_vllms(layouts, target):
    drafter = _loaded(layouts["vllm"], target)
    hidden = torch.randn(7, 3, drafter.spec.hidden_size, generator=torch.Generator().manual_seed(1))
    anchors = torch.randint(0, drafter.spec.vocab_size, (7,), generator=torch.Generator().manual_seed(2))
    ids, scores = edge_scores(drafter, hidden, anchors)
    selector = drafter.candidate_selector
    _, unary = candidates(drafter, hidden)
    theirs = _vllm_score_edges(selector.predecessor_codebook, selector.successor_codebook, ids, unary,
                               selector.hidden_projection(hidden), anchors, ids.shape[-1])
    assert torch.allclose(scores, theirs, atol=1e-5)
    tokens, _ = serving_walk(ids, scores)
    assert torch.equal(tokens, _vllm_walk(theirs, ids, ids.shape[-1]))
    assert not torch.equal(tokens, ids[:, :, 0])  # the selector does reorder here: the case is not trivial


def _prompt(target, text="Write a function that adds two numbers."):
    from dflash_eval.pipeline.continuations import Prompt, generate_greedy, prompt_ids

    ids = prompt_ids(target.tokenizer, Prompt("p", text), enable_thinking=False)
    return ids, generate_greedy(target, [ids], 16)[0]


@torch.inference_mode()
def test_greedy_drafts_equal_unary_argmax_when_the_low_rank_term_is_zero(layouts, target):
    drafter = _loaded(layouts["vllm"], target)
    ids, greedy = _prompt(target)
    tokens = torch.tensor(ids + greedy)
    taps = capture_taps(target, tokens, list(drafter.spec.taps)).taps
    with_selector = replay(drafter, taps, tokens, len(ids), Scoring(16))
    drafter.candidate_selector.predecessor_codebook.zero_()
    zeroed = replay(drafter, taps, tokens, len(ids), Scoring(16))
    logits = draft_logits(drafter, drafter.context(taps), tokens, zeroed.anchors, zeroed.block_lengths)
    argmax, offset = logits.argmax(-1).tolist(), 0
    for length, drafts in zip(zeroed.block_lengths, zeroed.drafts):
        assert drafts == argmax[offset + 1: offset + length]
        offset += length
    assert with_selector.drafts != zeroed.drafts  # and with the selector the walk differs from it


@torch.inference_mode()
def test_replay_walk_equals_live_loop(layouts, target):
    drafter = _loaded(layouts["speculators"], target)
    ids, greedy = _prompt(target)
    tokens = torch.tensor(ids + greedy)
    offline = replay(drafter, capture_taps(target, tokens, list(drafter.spec.taps)).taps, tokens, len(ids), Scoring(16, anchor_batch=3))
    live = live_generate(target, drafter, ids, Scoring(16))
    assert live.continuation == greedy
    assert offline.walk_anchors == live.walk_anchors and offline.walk_accept_lengths == live.walk_accept_lengths
    by_anchor = dict(zip(offline.anchors, offline.drafts))
    assert all(by_anchor[a] == d for a, d in zip(live.walk_anchors, live.walk_drafts))


@torch.inference_mode()
def test_live_loop_at_temperature_samples_candidates(layouts, target):
    from dflash_eval.model.sampling import Sampling, generator_for

    drafter = _loaded(layouts["speculators"], target)
    ids, _ = _prompt(target)
    live = live_generate(target, drafter, ids, Scoring(12), sampling=Sampling(temperature=0.8), generator=generator_for(0, "p", 0))
    assert sum(live.walk_accept_lengths) == len(live.continuation) - 1
    tokens = torch.tensor(live.tokens)
    ctx = drafter.context(capture_taps(target, tokens, list(drafter.spec.taps)).taps)
    for a, drafts in zip(live.walk_anchors, live.walk_drafts):
        hidden, _ = draft_hidden(drafter, ctx, tokens, [a], [len(drafts) + 1])
        cands, _ = candidates(drafter, hidden[0, 1:])
        assert all(d in row for d, row in zip(drafts, cands.tolist()))


@torch.inference_mode()
def test_estimate_reads_the_candidates_distribution(layouts, target):
    """At T > 0 the estimate's q is softmax(score / T) over the K candidates given the text's previous
    token. With K = the whole vocabulary and no low-rank term that is the unary softmax, so the alphas equal
    those of the plain-logits rule on the same forward (the same drafter read as DFlash)."""
    from dflash_eval.model.estimation import anchor_alphas
    from dflash_eval.model.sampling import Sampling

    drafter = _loaded(layouts["vllm"], target)
    ids, greedy = _prompt(target)
    tokens = torch.tensor(ids + greedy)
    capture = capture_taps(target, tokens, list(drafter.spec.taps), keep_hidden=True)
    args = (capture.taps, tokens, capture.hidden, target.lm_head, len(ids), Scoring(16))
    for policy in ("sample", "argmax"):
        sampling = Sampling(temperature=0.7, draft_policy=policy)
        restricted = anchor_alphas(drafter, *args, sampling)
        drafter.spec = replace(drafter.spec, selector_top_k=drafter.spec.vocab_size)
        drafter.candidate_selector.predecessor_codebook.zero_()
        whole = anchor_alphas(drafter, *args, sampling)
        drafter.spec = replace(drafter.spec, selector_top_k=None)  # read as DFlash: the plain-logits rule
        plain = anchor_alphas(drafter, *args, sampling)
        assert all(abs(x - y) < 1e-5 for xs, ys in zip(whole, plain) for x, y in zip(xs, ys)), policy
        if policy == "sample":
            assert restricted != whole  # K = 6 candidates and the selector change q
        drafter = _loaded(layouts["vllm"], target)


# -- output_multiplier and final_logit_softcapping (the z-lab fixture's values) ------------------------

# z-lab/dflash tests/fixtures/dflash2-config.json (Meta's published DFlash2 drafter): these two in dflash_config
ZLAB_DFLASH2_SCALES = {"final_logit_softcapping": 20.0, "output_multiplier": 0.19611613513818404}


def _zlab_compute_logits(logits: torch.Tensor, multiplier: float, cap: float | None) -> torch.Tensor:
    """z-lab dflash/model_mlx.py `DFlashDraftModel.compute_logits`, transcribed: `logits = logits *
    self.config.output_multiplier`; `if cap is not None and cap > 0: logits = mx.tanh(logits / cap) * cap`.
    `DFlash2DraftModel.propose` hands these logits to `CandidateSelector.select`, which takes their top-K
    (`argpartition`) as the candidates and their values as the unary scores; vLLM 0.33's `get_top_k_tokens`
    ranks the raw logits and then applies the multiplier and the cap to the K values (the same set: both maps
    are increasing)."""
    logits = logits * multiplier
    if cap is not None and cap > 0:
        logits = torch.tanh(logits / cap) * cap
    return logits


@torch.inference_mode()
def test_softcapped_dflash2_config_changes_the_logits_as_the_references_do(layouts, target, tmp_path):
    capped = _edit(layouts["vllm"], tmp_path / "capped", lambda c: c["dflash_config"].update(ZLAB_DFLASH2_SCALES))
    plain, scaled = _loaded(layouts["vllm"], target), _loaded(capped, target)
    assert (scaled.spec.output_multiplier, scaled.spec.logit_softcap) == (0.19611613513818404, 20.0)
    # hidden states large enough that the raw logits reach the cap's bend (|multiplier x logit| ~ cap)
    hidden = 40 * torch.randn(6, 3, plain.spec.hidden_size, generator=torch.Generator().manual_seed(3))
    raw = plain.lm_head_table()(hidden)
    assert (raw * ZLAB_DFLASH2_SCALES["output_multiplier"]).abs().max() > 10
    ids, unary = candidates(scaled, hidden)
    reference = _zlab_compute_logits(raw, ZLAB_DFLASH2_SCALES["output_multiplier"],
                                     ZLAB_DFLASH2_SCALES["final_logit_softcapping"])
    their_ids = reference.topk(scaled.spec.selector_top_k, dim=-1).indices
    assert torch.equal(ids.sort(-1).values, their_ids.sort(-1).values)  # the same candidates
    assert torch.allclose(unary, reference.gather(-1, ids), atol=1e-5)  # the same unary scores
    plain_ids, plain_unary = candidates(plain, hidden)
    assert torch.equal(plain_ids, ids) and not torch.allclose(plain_unary, unary)
    anchors = torch.randint(0, plain.spec.vocab_size, (6,), generator=torch.Generator().manual_seed(4))
    walk, plain_walk = serving_walk(*edge_scores(scaled, hidden, anchors))[0], serving_walk(
        *edge_scores(plain, hidden, anchors))[0]
    assert not torch.equal(walk, plain_walk)  # smaller unary scores: the edge term reorders more candidates


def test_zlabs_published_dflash2_config_is_read_with_its_scales(tmp_path):
    """The config of z-lab's fixture (tests/fixtures/dflash2-config.json) as published, read without weights."""
    from dflash_eval.formats import dflash2
    from dflash_eval.formats.checkpoints import spec_from_zlab

    config = {
        "architectures": ["DFlash2DraftModel"], "attention_bias": False, "attention_dropout": 0.0, "bos_token_id": 200000,
        "is_causal": False, "dflash_config": {"block_size": 16, "conv_group_size": 16, "conv_kernel_size": 2,
                                              **ZLAB_DFLASH2_SCALES, "mask_token_id": 201818, "selector_rank": 256,
                                              "selector_top_k": 16, "target_layer_ids": [1, 13, 25, 37, 49]},
        "dtype": "bfloat16", "eos_token_id": 200001, "head_dim": 128, "hidden_act": "silu", "hidden_size": 6656,
        "initializer_range": 0.02, "intermediate_size": 19968, "layer_types": ["sliding_attention"] * 5,
        "max_position_embeddings": 131072, "max_window_layers": 5, "model_type": "qwen3", "num_attention_heads": 32,
        "num_hidden_layers": 5, "num_key_value_heads": 8, "num_target_layers": 52, "pad_token_id": 200018,
        "rms_norm_eps": 1e-05, "rope_parameters": {"rope_theta": 500000.0, "rope_type": "default"},
        "sliding_window": 2048, "tie_word_embeddings": False, "transformers_version": "5.15.0", "use_cache": False,
        "use_sliding_window": True, "vocab_size": 202048}
    base, settings = dflash2.base_config(config, tmp_path / "config.json")
    spec = dflash2.finish_spec(spec_from_zlab(base, tmp_path, {}), settings, tmp_path / "config.json")
    assert (spec.output_multiplier, spec.logit_softcap, spec.selector_top_k, spec.block_size) == (
        0.19611613513818404, 20.0, 16, 16)
    assert spec.semantics == "vllm" and [x.causal_in_block for x in spec.layers] == [False] * 5
