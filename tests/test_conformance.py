"""Conformance: dflash-eval's numbers equal what the reference packages' OWN code computes.

References run here (see tests/reference_code.py; installed by `scripts/bootstrap.sh test`):
- z-lab `dflash==0.1.0`: its drafter class and its live speculative loop `dflash_generate` (temperature 0),
  on z-lab-format checkpoints. Compared with `dflash_eval.commands.evaluate.evaluate` (trajectory replay): the same
  continuation, the same `acceptance_lengths` on every prompt (z-lab's per-step committed-token record),
  the same tau (z-lab's: mean over prompts of the prompt's mean acceptance length). Also its drafter
  forward + `compute_logits` logit by logit against `draft_logits`, and, where its loop cannot run (a
  sliding layer whose window `use_sliding_window` nulled), its loop accounting over its forward's drafts.
- speculators `==0.9.0`: its `DFlashDraftModel._backbone_forward` (its training forward, anchor-block
  mask included) on speculators-format checkpoints, compared logit by logit with
  `dflash_eval.model.drafting.draft_logits` at every anchor; and its `DFlashConverter` (z-lab -> speculators).

Fixture: one drafter for the dense qwen3 tiny target (z-lab's loop needs a target whose HF cache can be
cropped; Gated-DeltaNet state cannot), trained once with full attention, then variants made by copying
the folder and editing only config.json. Where the two references disagree, the checkpoint's format
decides; a z-lab-format checkpoint must follow z-lab's rules, a speculators one speculators' rules.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import reference_code as ref
import torch

from dflash_eval.core.settings.run_settings import Scoring

# transformers' internals: also run on the oldest supported transformers (scripts/compat.sh)
pytestmark = pytest.mark.compat

MAX_NEW_TOKENS = 40
BLOCK_SIZE = 4
TRAIN_STEPS = 100  # full attention, 12 x 48 tokens: tau ~3.1 with B = 4 (not saturated: acceptance varies)
TAU_TOLERANCE = 1e-9
LOGIT_TOLERANCE = 1e-4  # fp32


# ---------------------------------------------------------------------------------------------------
# fixtures (module scope: built once)


@pytest.fixture(scope="module")
def refs():
    """Import both references up front: a missing one fails the module's tests with the install line."""
    return {"zlab": ref.require("dflash.model"), "speculators": ref.require("speculators.models.dflash.core"),
            "converter": ref.require("speculators.convert.dflash.converter")}


@pytest.fixture(scope="module")
def bed(tmp_path_factory) -> dict[str, Path]:
    from dflash_eval.demo.tiny_tokenizer import train_tokenizer
    from dflash_eval.testing.tiny import build_target

    root = tmp_path_factory.mktemp("conformance-bed")
    tokenizer = train_tokenizer(root / "tokenizer")
    return {"tokenizer": tokenizer, "qwen3": build_target("qwen3", root / "qwen3", tokenizer)}


@pytest.fixture(scope="module")
def target(bed):
    from dflash_eval.model.target import load_target

    return load_target(str(bed["qwen3"]), device="cpu", dtype="float32")


@pytest.fixture(scope="module")
def prompts(target, tmp_path_factory):
    """The 12 demo prompts: ids through our chat template (thinking off, the qwen3 default) + a JSONL file."""
    from dflash_eval.pipeline.continuations import Prompt, prompt_ids
    from dflash_eval.pipeline.prompts import DEMO_PROMPTS

    items = [Prompt(f"p{i}", text) for i, text in enumerate(DEMO_PROMPTS)]
    path = tmp_path_factory.mktemp("conformance-prompts") / "conformance.jsonl"
    path.write_text("".join(json.dumps({"id": p.id, "prompt": p.text}) + "\n" for p in items))
    return {"file": path, "ids": {p.id: prompt_ids(target.tokenizer, p, False) for p in items}}


@pytest.fixture(scope="module")
def trained(target, tmp_path_factory) -> Path:
    """A trained z-lab-format drafter, full attention in both layers (bidirectional in block)."""
    from dflash_eval.demo.train import TrainConfig, greedy_sequences, train_drafter
    from dflash_eval.pipeline.prompts import DEMO_PROMPTS

    out = tmp_path_factory.mktemp("conformance-trained") / "zlab-full"
    return train_drafter(target, greedy_sequences(target, list(DEMO_PROMPTS), 48),
                         TrainConfig(block_size=BLOCK_SIZE, sliding_layers=0, steps=TRAIN_STEPS), out, fmt="zlab")


def _variant(source: Path, out: Path, edit) -> Path:
    """Copy a checkpoint folder and edit only its config.json."""
    shutil.copytree(source, out)
    config = json.loads((out / "config.json").read_text())
    edit(config)
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    return out


def _zlab_sliding(window: int, *, is_causal=None, use_sliding_window=True):
    def edit(config):
        config["layer_types"] = ["sliding_attention", "full_attention"]
        config["sliding_window"] = window
        config.pop("is_causal", None)
        config.pop("use_sliding_window", None)
        if use_sliding_window is not None:
            config["use_sliding_window"] = use_sliding_window
        if is_causal is not None:
            config["is_causal"] = is_causal
    return edit


def _zlab_full_is_causal(config):
    config["layer_types"] = ["full_attention", "full_attention"]
    config["use_sliding_window"] = False
    config["sliding_window"] = None
    config["is_causal"] = True


def _top_level_scale(config):
    config["input_embedding_scale"] = 1.5


def _nested_scale(config):
    config["dflash_config"]["input_embedding_scale"] = 1.5


ZLAB_VARIANTS = {
    # (a) as trained: full attention, bidirectional in block
    "a-full": lambda config: config.pop("is_causal", None),
    # (b) a sliding layer whose window is smaller than the context; no is_causal key (z-lab: sliding causal)
    "b-sliding-w8": _zlab_sliding(8),
    "b-sliding-w12": _zlab_sliding(12),
    # (c) the same, with is_causal false (z-lab: every layer bidirectional, window on both sides)
    "c-sliding-w8-is_causal-false": _zlab_sliding(8, is_causal=False),
    "c-sliding-w12-is_causal-false": _zlab_sliding(12, is_causal=False),
    # (d) is_causal true with full layers only (z-lab: every layer causal in block)
    "d-full-is_causal-true": _zlab_full_is_causal,
    # (e) input_embedding_scale (z-lab scales the block embeddings; dflash_config first, then top level)
    "e-input_embedding_scale-top": _top_level_scale,
    "e-input_embedding_scale-dflash_config": _nested_scale,
    # output_multiplier / final_logit_softcapping (z-lab's compute_logits): logits change, argmax does not
    "e-output_multiplier-top": lambda config: config.update(output_multiplier=0.5),
    "e-final_logit_softcapping-dflash_config": lambda config: config["dflash_config"].update(final_logit_softcapping=2.0),
    # (f) sliding layer_types without use_sliding_window (HF nulls the window: z-lab causal, no window)
    "f-sliding-no-use_sliding_window": _zlab_sliding(8, use_sliding_window=None),
}
# z-lab's own loop cannot run (f): its draft cache, transformers' DynamicCache(config=...), builds a
# DynamicSlidingWindowLayer(sliding_window=None) for the sliding layer and raises TypeError (transformers
# 5.15, z-lab's pin, and 5.24 alike). (f) is checked through z-lab's drafter forward instead.
LOOP_VARIANTS = [name for name in ZLAB_VARIANTS if not name.startswith("f-")]


@pytest.fixture(scope="module")
def zlab_variants(trained, tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("conformance-zlab")
    return {name: _variant(trained, root / name, edit) for name, edit in ZLAB_VARIANTS.items()}


@pytest.fixture(scope="module")
def converted(refs, zlab_variants, bed, tmp_path_factory) -> dict[str, Path]:
    """(g) speculators' own converter applied to (a) and (b, window 8)."""
    root = tmp_path_factory.mktemp("conformance-converted")
    return {name: ref.speculators_convert(zlab_variants[name], root / name, bed["qwen3"])
            for name in ("a-full", "b-sliding-w8")}


def _speculators_edit(*, layer_types, window=None, use_sliding_window=True, non_causal=None):
    def edit(config):
        body = config["transformer_layer_config"]
        body["layer_types"] = layer_types
        body["sliding_window"] = window
        body.pop("use_sliding_window", None)
        if use_sliding_window is not None:
            body["use_sliding_window"] = use_sliding_window
        config.pop("sliding_window_non_causal", None)
        if non_causal is not None:
            config["sliding_window_non_causal"] = non_causal
    return edit


SLIDING_FULL = ["sliding_attention", "full_attention"]
SPECULATORS_VARIANTS = {
    "full": _speculators_edit(layer_types=["full_attention", "full_attention"], use_sliding_window=False),
    "sliding-w8-causal": _speculators_edit(layer_types=SLIDING_FULL, window=8, non_causal=False),
    "sliding-w12-causal": _speculators_edit(layer_types=SLIDING_FULL, window=12, non_causal=False),
    "sliding-w8-non-causal": _speculators_edit(layer_types=SLIDING_FULL, window=8, non_causal=True),
    "sliding-w12-non-causal": _speculators_edit(layer_types=SLIDING_FULL, window=12, non_causal=True),
    "sliding-no-use_sliding_window": _speculators_edit(layer_types=SLIDING_FULL, window=8, use_sliding_window=None),
}


@pytest.fixture(scope="module")
def speculators_variants(converted, tmp_path_factory) -> dict[str, Path]:
    """speculators-format drafters: the converter's output of (a), config.json edited."""
    root = tmp_path_factory.mktemp("conformance-speculators")
    return {name: _variant(converted["a-full"], root / name, edit) for name, edit in SPECULATORS_VARIANTS.items()}


@pytest.fixture(scope="module")
def run_dflash_eval(bed, prompts, tmp_path_factory):
    """dflash-eval's `evaluate` on one drafter: {prompt_id: samples row} and run.json."""
    from dflash_eval.commands.evaluate import RunOptions, evaluate
    from dflash_eval.core.documents.results import RUN_JSON, SAMPLES, read_samples

    cache = tmp_path_factory.mktemp("conformance-cache")  # continuations generated once, reused
    counter = iter(range(10_000))
    memo: dict[tuple, tuple[dict, dict]] = {}

    def run(drafter: Path, **options):
        key = (drafter, repr(sorted(options.items())))
        if key in memo:
            return memo[key]
        out = tmp_path_factory.mktemp("conformance-runs") / f"run{next(counter)}"
        evaluate(RunOptions(drafters=[str(drafter)], target=str(bed["qwen3"]), prompts=str(prompts["file"]),
                            max_new_tokens=MAX_NEW_TOKENS, out=out, cache_dir=cache, device="cpu",
                            dtype="float32", argv=["test_conformance"], **options))
        rows = {row["prompt_id"]: row for row in read_samples(out / SAMPLES)}
        memo[key] = rows, json.loads((out / RUN_JSON).read_text())
        return memo[key]

    return run


@pytest.fixture(scope="module")
def zlab_reference(target, prompts):
    """z-lab's own loop over every prompt, memoized per checkpoint: {prompt_id: (new ids, acceptance)}."""
    from dflash_eval.pipeline.continuations import stop_token_ids

    stops = stop_token_ids(target)
    memo: dict[Path, dict[str, tuple[list[int], list[int]]]] = {}

    def run(drafter: Path):
        if drafter not in memo:
            model = ref.zlab_drafter(drafter)
            memo[drafter] = {pid: ref.zlab_generate(target.model, drafter, ids, MAX_NEW_TOKENS, stops, drafter=model)
                             for pid, ids in prompts["ids"].items()}
        return memo[drafter]

    return run


@pytest.fixture(scope="module")
def zlab_forward_walk(target, prompts, zlab_variants, zlab_reference):
    """{prompt_id: (ids, lengths)}: z-lab's loop accounting replayed over z-lab's own drafter forward.

    The trajectory is z-lab's loop output on (a) (at temperature 0 the target's greedy continuation,
    whatever the drafter); at anchor a the block has min(B, max_length - a) slots, as `dflash_generate`'s
    verify_size (max_length = prompt + max_new_tokens)."""
    trajectory = zlab_reference(zlab_variants["a-full"])
    memo: dict[Path, dict[str, tuple[list[int], list[int]]]] = {}

    def run(drafter: Path):
        if drafter not in memo:
            model = ref.zlab_drafter(drafter)
            B = model.block_size
            memo[drafter] = {}
            for pid, prompt in prompts["ids"].items():
                seq = prompt + trajectory[pid][0]
                anchors = list(range(len(prompt), len(seq) - 1))
                lengths = [min(B, len(prompt) + MAX_NEW_TOKENS - a) for a in anchors]
                drafts = ref.zlab_block_logits(model, target.model, seq, anchors, lengths).argmax(-1).tolist()
                n_of, offset = {}, 0
                for a, length in zip(anchors, lengths):
                    n_of[a] = _accepted(drafts[offset + 1: offset + length], seq, a)
                    offset += length
                memo[drafter][pid] = (trajectory[pid][0], _walk(n_of, len(prompt), len(seq)))
        return memo[drafter]

    return run


# ---------------------------------------------------------------------------------------------------
# comparison helpers


def _accepted(drafted: list[int], seq: list[int], anchor: int) -> int:
    """Leading drafted slots (1, 2, ...) equal to the trajectory's tokens: z-lab's
    `(block[1:] == posterior[:-1]).cumprod().sum()` at temperature 0, where posterior = the greedy path."""
    n = 0
    for j, token in enumerate(drafted, start=1):
        if anchor + j >= len(seq) or token != seq[anchor + j]:
            break
        n += 1
    return n


def _assert_close(name: str, got: torch.Tensor, want: torch.Tensor, reference: str) -> None:
    assert got.shape == want.shape, f"{name}: {tuple(got.shape)} vs {reference} {tuple(want.shape)}"
    diff = (got.float() - want.float()).abs().max().item()
    agree = (got.argmax(-1) == want.argmax(-1)).float().mean().item()
    assert agree == 1.0 and diff < LOGIT_TOLERANCE, (
        f"{name}: argmax agreement {agree:.3f}, max |logit diff| {diff:.2e} vs {reference}")


def _compare_runs(expected: dict[str, tuple[list[int], list[int]]], rows: dict[str, dict], run_json: dict,
                  label: str) -> list[str]:
    """Differences between a reference's (ids, acceptance lengths) per prompt and a dflash-eval run."""
    problems = []
    missing = sorted(set(expected) - set(rows))
    if missing:
        problems.append(f"dflash-eval has no row for prompts {missing}")
    ids_differ = [pid for pid in expected if pid in rows and rows[pid]["continuation_ids"] != expected[pid][0]]
    if ids_differ:
        pid = ids_differ[0]
        problems.append(f"continuation ids differ on {len(ids_differ)}/{len(expected)} prompts (first {pid}: "
                        f"{label} {expected[pid][0]} vs dflash-eval {rows[pid]['continuation_ids']})")
    acc_differ = [pid for pid in expected if pid in rows and rows[pid]["walk_accept_lengths"] != expected[pid][1]]
    if acc_differ:
        pid = acc_differ[0]
        problems.append(f"acceptance lengths differ on {len(acc_differ)}/{len(expected)} prompts (first {pid}: "
                        f"{label} {expected[pid][1]} vs dflash-eval {rows[pid]['walk_accept_lengths']})")
    want = ref.zlab_tau([acc for _, acc in expected.values()])
    got = run_json["drafters"][0]["metrics"]["tau_macro"]
    if got is None or abs(got - want) > TAU_TOLERANCE:
        problems.append(f"tau_macro {label} {want!r} vs dflash-eval {got!r}")
    return problems


def _walk(n_of_anchor: dict[int, int], prompt_len: int, total_len: int) -> list[int]:
    """z-lab's loop accounting replayed over a fixed greedy trajectory of `total_len` tokens (prompt +
    continuation, the continuation ending at the cap or just after its stop token): from the first
    generated token, each step commits min(n + 1, tokens left) tokens (`dflash_generate`: `produced`)."""
    lengths, anchor = [], prompt_len
    while anchor < total_len - 1:
        produced = min(n_of_anchor[anchor] + 1, total_len - 1 - anchor)
        lengths.append(produced)
        anchor += produced
    return lengths


# ---------------------------------------------------------------------------------------------------
# z-lab: dflash_generate vs dflash-eval, on z-lab-format checkpoints


@pytest.mark.parametrize("variant", LOOP_VARIANTS)
def test_zlab_loop_equals_dflash_eval(refs, variant, zlab_variants, zlab_reference, run_dflash_eval):
    """Same continuation, same acceptance_lengths on every prompt, same tau as z-lab's `dflash_generate`."""
    drafter = zlab_variants[variant]
    expected = zlab_reference(drafter)
    rows, run_json = run_dflash_eval(drafter)
    problems = _compare_runs(expected, rows, run_json, "z-lab")
    assert not problems, f"{variant}: " + "; ".join(problems)


def test_zlab_loop_cannot_run_a_sliding_layer_without_window(refs, zlab_variants, zlab_reference):
    """Documents why (f) is compared through z-lab's forward: z-lab's loop itself fails there (its HF draft
    cache gets a sliding layer with window None). If a new pin makes it run, move (f) into LOOP_VARIANTS."""
    with pytest.raises(TypeError):
        zlab_reference(zlab_variants["f-sliding-no-use_sliding_window"])


@pytest.mark.parametrize("variant", list(ZLAB_VARIANTS))
def test_zlab_forward_equals_draft_logits(refs, variant, zlab_variants, target, sequences):
    """z-lab's own drafter forward (+ compute_logits) vs dflash_eval.model.drafting.draft_logits, every anchor."""
    drafter_dir = zlab_variants[variant]
    model = ref.zlab_drafter(drafter_dir)
    for seq in sequences:
        anchors = list(range(1, len(seq)))  # z-lab needs >= 1 context row
        want = ref.zlab_block_logits(model, target.model, seq, anchors)
        _, _, got = _dflash_eval_logits(drafter_dir, target, seq, anchors)
        _assert_close(variant, got, want, "z-lab DFlashDraftModel.forward")


@pytest.mark.parametrize("variant", list(ZLAB_VARIANTS))
def test_zlab_forward_walk_equals_dflash_eval(refs, variant, zlab_variants, zlab_forward_walk, run_dflash_eval):
    """z-lab's loop accounting over z-lab's own forward drafts (blocks shortened at the cap as its loop
    does) equals dflash-eval's run: the only z-lab check for (f), and a second one for the others."""
    expected = zlab_forward_walk(zlab_variants[variant])
    rows, run_json = run_dflash_eval(zlab_variants[variant])
    problems = _compare_runs(expected, rows, run_json, "z-lab forward walk")
    assert not problems, f"{variant}: " + "; ".join(problems)


@pytest.mark.parametrize("variant", LOOP_VARIANTS)
def test_zlab_forward_walk_reproduces_zlab_loop(refs, variant, zlab_variants, zlab_forward_walk, zlab_reference):
    """Validates the forward walk above against z-lab's real loop wherever the loop runs (reference vs
    reference: no dflash-eval code involved)."""
    walked = zlab_forward_walk(zlab_variants[variant])
    looped = zlab_reference(zlab_variants[variant])
    differ = [pid for pid in looped if looped[pid] != walked[pid]]
    assert not differ, f"{variant}: {differ[0]}: loop {looped[differ[0]][1]} vs forward walk {walked[differ[0]][1]}"


def test_zlab_variants_are_not_all_alike(refs, zlab_variants, zlab_forward_walk, target, sequences):
    """The variants must matter under z-lab's own rules, or the tests above would prove little: each
    changes z-lab's drafts (argmax somewhere) or logits relative to (a), and the attention and embedding
    variants change its acceptance on the prompts too."""
    base_walk = zlab_forward_walk(zlab_variants["a-full"])
    for name in ("b-sliding-w8", "b-sliding-w12", "c-sliding-w8-is_causal-false", "d-full-is_causal-true",
                 "e-input_embedding_scale-top"):
        other = zlab_forward_walk(zlab_variants[name])
        assert any(other[pid][1] != base_walk[pid][1] for pid in base_walk), f"{name} accepts exactly as a-full"
    lengths = [n for _, acc in base_walk.values() for n in acc]
    assert len(set(lengths)) >= 3, f"a-full's acceptance barely varies ({sorted(set(lengths))}): retrain"

    seq = sequences[0]
    anchors = list(range(1, len(seq)))
    logits = {name: ref.zlab_block_logits(ref.zlab_drafter(path), target.model, seq, anchors)
              for name, path in zlab_variants.items()}
    for name, value in logits.items():
        if name != "a-full":
            assert (value - logits["a-full"]).abs().max() > 1e-3, f"{name}: same logits as a-full under z-lab"
    for name in ("b-sliding-w8", "b-sliding-w12", "c-sliding-w8-is_causal-false", "c-sliding-w12-is_causal-false",
                 "d-full-is_causal-true", "e-input_embedding_scale-top", "f-sliding-no-use_sliding_window"):
        assert (logits[name].argmax(-1) != logits["a-full"].argmax(-1)).any(), f"{name}: same drafts as a-full"
    # z-lab's _draft_value: the key inside dflash_config and at the top level mean the same
    assert torch.equal(logits["e-input_embedding_scale-top"], logits["e-input_embedding_scale-dflash_config"])


# ---------------------------------------------------------------------------------------------------
# (g) speculators' converter output


def test_converted_full_attention_equals_zlab_loop(refs, converted, zlab_variants, zlab_reference, run_dflash_eval):
    """Full attention: both references' rules coincide, so dflash-eval on speculators' conversion of (a)
    must reproduce z-lab's loop on the z-lab original."""
    expected = zlab_reference(zlab_variants["a-full"])
    rows, run_json = run_dflash_eval(converted["a-full"])
    assert run_json["drafters"][0]["format"] == "speculators"
    problems = _compare_runs(expected, rows, run_json, "z-lab (z-lab original)")
    assert not problems, "; ".join(problems)


def test_converted_sliding_with_zlab_semantics_equals_zlab_loop(refs, converted, zlab_variants, zlab_reference,
                                                                run_dflash_eval):
    """A sliding layer: speculators' rules (window from the anchor) and z-lab's (window from the query)
    differ, and a speculators-format checkpoint follows speculators' by default. With the explicit
    override `semantics="zlab"` dflash-eval must reproduce z-lab's loop on the z-lab original."""
    from dflash_eval.core.settings.inputs import InputSettings

    if "semantics" not in InputSettings.__dataclass_fields__:
        pytest.fail("dflash_eval's InputSettings has no `semantics` field (the --semantics zlab override)")
    expected = zlab_reference(zlab_variants["b-sliding-w8"])
    rows, run_json = run_dflash_eval(converted["b-sliding-w8"], semantics=["zlab"])  # --semantics zlab
    assert run_json["drafters"][0]["format"] == "speculators"
    problems = _compare_runs(expected, rows, run_json, "z-lab (z-lab original)")
    assert not problems, "; ".join(problems)


def test_converted_sliding_follows_speculators_forward(refs, converted, target, prompts, zlab_variants,
                                                       zlab_reference, run_dflash_eval):
    """By default a speculators-format sliding drafter follows speculators' rules: dflash-eval's n(a) at
    every anchor and its walk equal those from the drafts of speculators' own `_backbone_forward`
    (z-lab's loop accounting, `_walk`). speculators always drafts whole blocks, so the run uses
    `final_block="full"`. The trajectory is z-lab's loop output on (a) (the target's greedy continuation)."""
    drafter_dir = converted["b-sliding-w8"]
    model = ref.speculators_drafter(drafter_dir)
    B = model.block_size
    trajectory = zlab_reference(zlab_variants["a-full"])
    rows, run_json = run_dflash_eval(drafter_dir, final_block="full")
    expected, accepted = {}, {}
    for pid, prompt in prompts["ids"].items():
        seq = prompt + trajectory[pid][0]
        anchors = list(range(len(prompt), len(seq) - 1))
        taps = ref.speculators_taps(target.model, seq, model.config.aux_hidden_state_layer_ids)
        drafts = ref.speculators_logits(None, taps, seq, anchors, drafter=model).argmax(-1).view(len(anchors), B)
        n_of = {a: _accepted(row[1:], seq, a) for a, row in zip(anchors, drafts.tolist())}
        accepted[pid] = [n_of[a] for a in anchors]
        expected[pid] = (trajectory[pid][0], _walk(n_of, len(prompt), len(seq)))
    differ = [pid for pid in accepted if rows.get(pid, {}).get("anchor_accepted") != accepted[pid]]
    problems = _compare_runs(expected, rows, run_json, "speculators forward")
    if differ:
        pid = differ[0]
        problems.insert(0, f"n(a) differs on {len(differ)}/{len(accepted)} prompts (first {pid}: speculators "
                           f"{accepted[pid]} vs dflash-eval {rows.get(pid, {}).get('anchor_accepted')})")
    assert not problems, "; ".join(problems)


def test_converter_output_is_what_dflash_eval_reads(refs, converted, zlab_variants):
    """speculators' converter: same body weights, taps renumbered t -> t + 1, same block and mask id."""
    from safetensors.torch import load_file

    from dflash_eval.formats.checkpoints import checked_spec

    for name, out in converted.items():
        zspec, _ = checked_spec(zlab_variants[name])
        sspec, _ = checked_spec(out)
        assert sspec.format == "speculators" and zspec.format == "zlab"
        assert (sspec.taps, sspec.block_size, sspec.mask_token_id) == (zspec.taps, zspec.block_size, zspec.mask_token_id)
        assert [(layer.kind, layer.window) for layer in sspec.layers] == [(layer.kind, layer.window) for layer in zspec.layers]
        original = load_file(str(zlab_variants[name] / "model.safetensors"))
        saved = load_file(str(out / "model.safetensors"))
        for key, tensor in original.items():
            assert torch.equal(saved[key], tensor), key


# ---------------------------------------------------------------------------------------------------
# speculators: _backbone_forward vs dflash_eval.model.drafting.draft_logits, every anchor


def _dflash_eval_logits(drafter_dir: Path, target, seq: list[int], anchors: list[int]):
    from dflash_eval.formats.checkpoints import checked_spec
    from dflash_eval.formats.files import weight_files
    from dflash_eval.model.drafter import load_drafter
    from dflash_eval.model.drafting import draft_logits
    from dflash_eval.model.target import capture_taps

    spec, _ = checked_spec(drafter_dir, target.info)
    drafter = load_drafter(spec, weight_files(drafter_dir))
    if spec.embedding_source == "target" or spec.lm_head_source == "target":
        drafter.attach_target(target.embed_tokens, target.lm_head)
    tokens = torch.tensor(seq)
    taps = capture_taps(target, tokens, list(spec.taps)).taps
    ctx = drafter.context(taps)
    return spec, taps, draft_logits(drafter, ctx, tokens, anchors, [spec.block_size] * len(anchors))


@pytest.fixture(scope="module")
def sequences(refs, prompts, zlab_variants, zlab_reference) -> list[list[int]]:
    """4 prompts + their greedy continuations (z-lab's loop output on (a)), for the logit comparisons."""
    trajectory = zlab_reference(zlab_variants["a-full"])
    return [prompts["ids"][pid] + trajectory[pid][0] for pid in list(prompts["ids"])[:4]]


def _assert_logits_match(name, drafter_dir, model, target, sequences):
    for seq in sequences:
        anchors = list(range(len(seq)))  # every position, context-free anchor 0 and the last token included
        spec_taps = ref.speculators_taps(target.model, seq, model.config.aux_hidden_state_layer_ids)
        want = ref.speculators_logits(None, spec_taps, seq, anchors, drafter=model)
        spec, our_taps, got = _dflash_eval_logits(drafter_dir, target, seq, anchors)
        assert list(spec.speculators_taps) == list(model.config.aux_hidden_state_layer_ids)
        assert torch.allclose(our_taps, spec_taps, atol=1e-5, rtol=0), f"{name}: taps differ from HF hidden_states[k]"
        _assert_close(name, got, want, "speculators DFlashDraftModel._backbone_forward")


@pytest.mark.parametrize("variant", list(SPECULATORS_VARIANTS))
def test_speculators_backbone_equals_draft_logits(refs, variant, speculators_variants, target, sequences):
    """speculators' `_backbone_forward` (anchor-block mask, layers, its verifier-loaded embedding and head)
    vs dflash_eval.model.drafting.draft_logits at every position as an anchor; taps read by each side its own way."""
    drafter_dir = speculators_variants[variant]
    model = ref.speculators_drafter(drafter_dir)
    _assert_logits_match(variant, drafter_dir, model, target, sequences)


@pytest.mark.slow
def test_speculators_flex_attention_equals_draft_logits(refs, speculators_variants, target, sequences):
    """Once with speculators' default backend (simple_flex_attention, its compiled block mask), on a
    drafter with both a sliding and a full layer: the backend choice (sdpa elsewhere) changes nothing."""
    drafter_dir = speculators_variants["sliding-w8-non-causal"]
    model = ref.speculators_drafter(drafter_dir, "simple_flex_attention")
    assert model._attn_impl == "simple_flex_attention"
    _assert_logits_match("sliding-w8-non-causal (flex)", drafter_dir, model, target, sequences[:1])


def test_speculators_variants_differ_from_each_other(refs, speculators_variants, target, sequences):
    """The speculators variants must give different drafts under speculators' own code, or the logit
    tests would not tell their rules apart."""
    seq = sequences[0]
    anchors = list(range(len(seq)))
    logits = {}
    for name, drafter_dir in speculators_variants.items():
        model = ref.speculators_drafter(drafter_dir)
        taps = ref.speculators_taps(target.model, seq, model.config.aux_hidden_state_layer_ids)
        logits[name] = ref.speculators_logits(None, taps, seq, anchors, drafter=model)
    for a, b in (("full", "sliding-w8-causal"), ("sliding-w8-causal", "sliding-w8-non-causal"),
                 ("sliding-w8-causal", "sliding-w12-causal")):
        assert (logits[a] - logits[b]).abs().max() > 1e-3, f"{a} and {b} give the same logits"
    # speculators: a sliding layer whose window HF nulled (no use_sliding_window) is full bidirectional
    assert torch.allclose(logits["sliding-no-use_sliding_window"], logits["full"], atol=1e-6)


def test_inspect_names_the_rule_of_each_layer_before_and_after_speculators_conversion(refs, bed, tmp_path):
    """A z-lab config with 4 sliding layers (window 2048) + 1 full layer, and speculators' own conversion
    of it: `inspect` prints each layer's rule and the reference function it follows, and the two differ
    exactly where the references do (window from the query vs from the anchor)."""
    from typer.testing import CliRunner

    from dflash_eval.cli import app
    from dflash_eval.testing.testbed import write_random_drafter

    zlab = write_random_drafter(bed["qwen3"], tmp_path / "zlab", "zlab", block_size=16, num_layers=5,
                                sliding_window=2048, sliding_layers=4)
    converted = ref.speculators_convert(zlab, tmp_path / "speculators", bed["qwen3"])
    runner = CliRunner()
    z = runner.invoke(app, ["inspect", str(zlab), "--target", str(bed["qwen3"])], env={"COLUMNS": "250"})
    s = runner.invoke(app, ["inspect", str(converted), "--target", str(bed["qwen3"])], env={"COLUMNS": "250"})
    assert z.exit_code == 0 and s.exit_code == 0, z.output + s.output
    assert z.stdout.count("window 2048 from the query (q - k < 2048, in block too), causal in block") == 4
    assert s.stdout.count("window 2048 from the anchor (a - 2048 <= p < a), causal in block") == 4
    for out in (z.stdout, s.stdout):
        assert "layer 4" in out and "full attention, no window, bidirectional in block" in out
    assert "dflash/model.py (Qwen3DFlashAttention.__init__, _attention_mask)" in z.stdout
    assert "create_anchor_block_mask_mod" in s.stdout


# ---------------------------------------------------------------------------------------------------
# (h) temperature > 0: z-lab's sampling code against ours


@pytest.mark.parametrize("temperature, top_p, top_k", [(1.0, 1.0, 0), (0.6, 1.0, 0), (1.0, 0.8, 0), (0.7, 1.0, 20),
                                                        (1.3, 0.9, 50)])
def test_sampling_probs_equal_zlab(refs, temperature, top_p, top_k):
    from dflash_eval.model.sampling import Sampling, sampling_probs

    logits = torch.randn(3, 5, 300, generator=torch.Generator().manual_seed(3)) * 4
    ours = sampling_probs(logits, Sampling(temperature, top_p, top_k))
    theirs = refs["zlab"]._sampling_probs(logits, temperature, top_p, top_k)
    assert torch.equal(ours, theirs)


def test_rejection_rule_equals_zlab_draw_for_draw(refs):
    """Same probabilities, same random stream (a generator seeded as z-lab's global one): z-lab's
    `_rejection_sample` and ours accept the same drafts and emit the same next token, every time."""
    from dflash_eval.model.sampling import rejection_step

    source = torch.Generator().manual_seed(11)
    for trial in range(200):
        g, vocab = 1 + trial % 5, 7
        target = torch.softmax(torch.randn(g + 1, vocab, generator=source) * 2, -1)
        draft = torch.softmax(torch.randn(g, vocab, generator=source) * 2, -1)
        drafts = torch.multinomial(draft, 1, generator=source)[:, 0]
        torch.manual_seed(trial)
        expected = refs["zlab"]._rejection_sample(drafts[None], target[None], draft[None])
        ours = rejection_step(drafts, draft, target, torch.Generator().manual_seed(trial))
        assert ours == (int(expected[0]), int(expected[1])), trial


@pytest.mark.slow
def test_live_sampling_tau_matches_zlab_loop_at_temperature_one(refs, target, prompts, trained):
    """z-lab's `dflash_generate` and our live loop at T = 1, 16 seeded samples per prompt: tau_macro (samples
    pooled per prompt, z-lab's mean acceptance length) agrees within the Monte-Carlo interval (99%)."""
    import numpy as np

    from dflash_eval.formats.checkpoints import checked_spec
    from dflash_eval.formats.files import weight_files
    from dflash_eval.model.drafter import load_drafter
    from dflash_eval.model.live import live_generate
    from dflash_eval.model.sampling import Sampling, generator_for
    from dflash_eval.model.target import stop_token_ids

    samples, new_tokens = 16, 24
    spec, _ = checked_spec(trained, target.info)
    ours_drafter = load_drafter(spec, weight_files(trained)).attach_target(target.embed_tokens, target.lm_head)
    zlab_model = ref.zlab_drafter(trained)
    stops = stop_token_ids(target)
    chosen = list(prompts["ids"].items())[:6]
    per_side: dict[str, list[list[float]]] = {"zlab": [], "ours": []}  # [prompt][sample] -> (steps, committed)
    for pid, ids in chosen:
        zl, ou = [], []
        for k in range(samples):
            torch.manual_seed(1000 + k)
            _, lengths = ref.zlab_generate(target.model, trained, ids, new_tokens, stops, drafter=zlab_model,
                                           temperature=1.0)
            zl.append((len(lengths), sum(lengths)))
            live = live_generate(target, ours_drafter, ids, Scoring(new_tokens), sampling=Sampling(1.0), generator=generator_for(0, pid, k))
            ou.append((len(live.walk_accept_lengths), sum(live.walk_accept_lengths)))
        per_side["zlab"].append(zl)
        per_side["ours"].append(ou)

    def tau_and_se(table):
        arr = np.array(table, dtype=float)  # [P, K, 2]
        tau = float(np.mean(arr[:, :, 1].sum(1) / arr[:, :, 0].sum(1)))
        rng = np.random.default_rng(0)
        draws = rng.integers(0, arr.shape[1], size=(2000, arr.shape[1]))  # resample samples within prompts
        boot = [np.mean(arr[:, d, 1].sum(1) / arr[:, d, 0].sum(1)) for d in draws]
        return tau, float(np.std(boot))

    (tau_z, se_z), (tau_o, se_o) = tau_and_se(per_side["zlab"]), tau_and_se(per_side["ours"])
    print(f"T=1 tau_macro z-lab {tau_z:.3f} +- {se_z:.3f}, dflash-eval {tau_o:.3f} +- {se_o:.3f}")
    assert tau_z > 1.2 and tau_o > 1.2  # drafts are accepted at T = 1: the rule is exercised
    assert abs(tau_z - tau_o) <= 2.576 * (se_z ** 2 + se_o ** 2) ** 0.5, (tau_z, se_z, tau_o, se_o)


# ---------------------------------------------------------------------------------------------------
# draft lengths (--draft-lengths): the walk at k equals z-lab's loop run with a block of k + 1


DRAFT_LENGTH_BLOCK = 8  # k = 3 and 5 are both shorter than B - 1


@pytest.fixture(scope="module")
def trained_b8(target, tmp_path_factory) -> Path:
    """A z-lab-format drafter trained with blocks of 8 (full attention: bidirectional in block)."""
    from dflash_eval.demo.train import TrainConfig, greedy_sequences, train_drafter
    from dflash_eval.pipeline.prompts import DEMO_PROMPTS

    out = tmp_path_factory.mktemp("conformance-trained-b8") / "zlab-b8"
    return train_drafter(target, greedy_sequences(target, list(DEMO_PROMPTS), 48),
                         TrainConfig(block_size=DRAFT_LENGTH_BLOCK, sliding_layers=0, steps=TRAIN_STEPS), out,
                         fmt="zlab")


def _zlab_generate_block(target_model, model, input_ids: list[int], block_size: int, stops) -> tuple[list[int], list[int]]:
    """z-lab's own `dflash_generate(block_size=...)` at temperature 0: (new ids, acceptance_lengths)."""
    zlab = ref.require("dflash.model")
    ids = torch.tensor([list(input_ids)], dtype=torch.long, device=target_model.device)
    with ref._cpu_timer(zlab):
        out = zlab.dflash_generate(model, target_model, ids, MAX_NEW_TOKENS, list(stops), block_size=block_size,
                                   return_stats=True)
    return out.output_ids[0, len(input_ids):].tolist(), [int(n) for n in out.acceptance_lengths]


def test_draft_length_walks_equal_zlab_loop_with_shorter_blocks(refs, target, prompts, trained_b8, run_dflash_eval):
    """`--draft-lengths 3,5` on a B = 8 drafter: dflash-eval's walk at k (its own replay with a block of
    k + 1) equals z-lab's `dflash_generate(block_size=k + 1)` prompt by prompt (same continuation, same
    acceptance_lengths), and tau_macro at k is z-lab's. The full block's walk cut at k differs on some
    prompt: a shorter block drafts other tokens, so cutting would be wrong and this test would see it."""
    from dflash_eval.pipeline.continuations import stop_token_ids

    rows, run_json = run_dflash_eval(trained_b8, draft_lengths="3,5")
    by_k = {e["k"]: e for e in run_json["drafters"][0]["by_draft_length"]}
    assert sorted(by_k) == [3, 5, DRAFT_LENGTH_BLOCK - 1]
    model = ref.zlab_drafter(trained_b8)
    stops = stop_token_ids(target)
    cut_differs = []
    for k in (3, 5):
        expected = {pid: _zlab_generate_block(target.model, model, ids, k + 1, stops)
                    for pid, ids in prompts["ids"].items()}
        problems = []
        for pid, (new_ids, lengths) in expected.items():
            row = rows[pid]
            if row["continuation_ids"] != new_ids:
                problems.append(f"{pid}: continuation differs from z-lab's at block {k + 1}")
            ours = row["by_draft_length"][str(k)]["walk_accept_lengths"]
            if ours != lengths:
                problems.append(f"{pid}: z-lab {lengths} vs dflash-eval {ours}")
            n_full = dict(zip(range(row["prompt_len"], row["prompt_len"] + len(row["anchor_accepted"])),
                              row["anchor_accepted"]))
            cut = _walk({a: min(n, k) for a, n in n_full.items()}, row["prompt_len"],
                        row["prompt_len"] + len(new_ids))
            cut_differs.append(cut != lengths)
        assert not problems, f"k = {k}: " + "; ".join(problems[:3])
        want = ref.zlab_tau([lengths for _, lengths in expected.values()])
        assert abs(by_k[k]["metrics"]["tau_macro"] - want) <= TAU_TOLERANCE, (k, by_k[k]["metrics"]["tau_macro"], want)
    assert any(cut_differs), "the full block's walk cut at k equals every walk at k: the check proves nothing here"
