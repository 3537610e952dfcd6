"""The fixture trainer makes drafters that really accept, and its injected bugs show the real symptoms.

Acceptance is measured here by an independent greedy-walk replay (primer section 5), written in this file
on purpose rather than taken from the package's metrics: draft every continuation anchor of a training
sequence with `draft_logits` (context = the drafter's features over the whole sequence; the mask hides
rows >= a), n(a) = leading slots whose argmax equals the sequence token at a + k, walk a0 = prompt
length, a += n + 1, tau = mean(n + 1) per sequence, then averaged over sequences (macro). Fixtures are
evaluated on their own training sequences: memorisation is expected.

Every fixture is trained once per module; all but the format/determinism pair use `fixture_config()`
(one-row windows, see its docstring), so correct and buggy drafters differ only by the bug.
"""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from dflash_eval.demo.train import (
    DEMO_PROMPTS,
    TrainConfig,
    fixture_config,
    greedy_sequences,
    train_drafter,
    training_logits,
)
from dflash_eval.formats.checkpoints import checked_spec
from dflash_eval.formats.files import weight_files
from dflash_eval.model.drafter import load_drafter
from dflash_eval.model.drafting import draft_logits
from dflash_eval.model.target import capture_taps, load_target
from dflash_eval.testing.testbed import write_random_drafter

MAX_NEW = 48


# -- fixtures ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def qwen3(test_bed):
    return load_target(str(test_bed["qwen3"]), device="cpu", dtype="float32")


@pytest.fixture(scope="module")
def sequences(qwen3):
    return greedy_sequences(qwen3, list(DEMO_PROMPTS), MAX_NEW)


def load(path, target):
    spec, _ = checked_spec(path, target.info)
    return load_drafter(spec, weight_files(path)).attach_target(target.embed_tokens, target.lm_head)


def _trained(target, sequences, out_dir, config, fmt="speculators"):
    path = train_drafter(target, sequences, config, out_dir, fmt)
    return path, load(path, target), json.loads((path / "train_log.json").read_text())


@pytest.fixture(scope="module")
def correct(qwen3, sequences, tmp_path_factory):
    return _trained(qwen3, sequences, tmp_path_factory.mktemp("correct"), fixture_config())


@pytest.fixture(scope="module")
def anchor_bug(qwen3, sequences, tmp_path_factory):
    return _trained(qwen3, sequences, tmp_path_factory.mktemp("anchor"), fixture_config(anchor_in_context=True))


@pytest.fixture(scope="module")
def drop_bug(qwen3, sequences, tmp_path_factory):
    return _trained(qwen3, sequences, tmp_path_factory.mktemp("drop"), fixture_config(drop_tap=1))


@pytest.fixture(scope="module")
def shift_bug(qwen3, sequences, tmp_path_factory):
    return _trained(qwen3, sequences, tmp_path_factory.mktemp("shift"), fixture_config(shift_taps=1))


@pytest.fixture(scope="module")
def both_formats(qwen3, sequences, tmp_path_factory):
    """The same short full-attention run written in both formats (two runs: also shows determinism)."""
    root = tmp_path_factory.mktemp("formats")
    config = TrainConfig(steps=40)
    return {fmt: train_drafter(qwen3, sequences, config, root / fmt, fmt) for fmt in ("zlab", "speculators")}


# -- the independent replay -------------------------------------------------------------------------


def accepted(drafter, target, ids, prompt_len, *, taps=None, anchor_in_context=False, edit=None):
    """n(a) for every continuation anchor a of one sequence."""
    features = capture_taps(target, ids, list(drafter.spec.taps if taps is None else taps)).taps
    if edit is not None:
        features = edit(features.clone())
    block, length = drafter.spec.block_size, ids.shape[0]
    anchors = list(range(prompt_len, length - 1))
    drafts = draft_logits(drafter, drafter.context(features), ids, anchors, [block] * len(anchors),
                          anchor_in_context=anchor_in_context).argmax(-1).view(len(anchors), block)
    n = {}
    for row, a in enumerate(anchors):
        k = 1
        while k < block and a + k < length and drafts[row, k] == ids[a + k]:
            k += 1
        n[a] = k - 1
    return n


def replay_tau(drafter, target, sequences, **kw) -> float:
    """Macro tau of the greedy walk a0 = prompt_len, a += n(a) + 1."""
    per_sequence = []
    for ids, prompt_len in sequences:
        n = accepted(drafter, target, ids, prompt_len, **kw)
        a, steps = prompt_len, []
        while a < ids.shape[0] - 1:
            steps.append(n[a] + 1)
            a += n[a] + 1
        per_sequence.append(sum(steps) / len(steps))
    return sum(per_sequence) / len(per_sequence)


def zero_tap(index, width):
    def edit(features):
        features[:, index * width:(index + 1) * width] = 0
        return features
    return edit


# -- tests ------------------------------------------------------------------------------------------


def test_sequences_are_the_targets_greedy_chat_continuations(qwen3, sequences):
    assert len(sequences) == len(DEMO_PROMPTS)
    eos = set(qwen3.model.generation_config.eos_token_id)  # <|im_end|> and <|endoftext|>, as Qwen ships
    for ids, prompt_len in sequences:
        prompt = qwen3.tokenizer.decode(ids[:prompt_len])
        # one user turn, generation prompt, thinking off by default (the empty think block is pre-filled)
        assert prompt.startswith("<|im_start|>user\n")
        assert prompt.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
        continuation = ids[prompt_len:]
        assert 0 < continuation.shape[0] <= MAX_NEW
        assert continuation.shape[0] == MAX_NEW or int(continuation[-1]) in eos
        assert not eos & set(continuation[:-1].tolist())
    # teacher-forced greedy over the whole sequence reproduces the generated tokens (cache vs no cache
    # may only flip exact near-ties)
    ids, prompt_len = sequences[0]
    greedy = capture_taps(qwen3, ids, [1]).greedy
    agree = (greedy[prompt_len - 1:-1] == ids[prompt_len:]).float().mean().item()
    assert agree >= 0.95


def test_training_layout_equals_draft_logits(qwen3, sequences, correct, both_formats):
    """`training_logits` over packed sequences gives what `draft_logits` gives each sequence alone."""
    (ids_a, len_a), (ids_b, len_b) = sequences[0], sequences[1]
    for drafter in (correct[1], load(both_formats["zlab"], qwen3)):
        taps = list(drafter.spec.taps)
        feats = [capture_taps(qwen3, ids, taps).taps for ids in (ids_a, ids_b)]
        offset = ids_a.shape[0]
        packed = torch.cat(feats)
        tokens = torch.cat([ids_a, ids_b])
        seq_start = torch.cat([torch.zeros(offset, dtype=torch.long), torch.full((ids_b.shape[0],), offset)])
        anchors_a, anchors_b = [len_a, len_a + 5, ids_a.shape[0] - 2], [len_b, len_b + 7]
        anchors = anchors_a + [offset + a for a in anchors_b]
        for lenient in (False, True):
            with torch.no_grad():
                got = training_logits(drafter, packed, tokens, anchors, [4] * len(anchors), seq_start=seq_start,
                                      anchor_in_context=lenient)
            want = torch.cat([
                draft_logits(drafter, drafter.context(feats[0]), ids_a, anchors_a, [4] * 3, anchor_in_context=lenient),
                draft_logits(drafter, drafter.context(feats[1]), ids_b, anchors_b, [4] * 2, anchor_in_context=lenient),
            ])
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_correct_drafter_accepts_far_above_chance(qwen3, sequences, correct, test_bed, tmp_path):
    path, drafter, log = correct
    tau = replay_tau(drafter, qwen3, sequences)
    assert tau >= 2.5, tau  # B = 4: at most 4; measured 3.93
    assert log["final_loss"] < log["loss"][0] / 5
    random_dir = write_random_drafter(test_bed["qwen3"], tmp_path / "random", block_size=4, num_layers=2,
                                      sliding_window=1, sliding_layers=2)
    assert replay_tau(load(random_dir, qwen3), qwen3, sequences) < 1.2  # chance: ~1.0


def test_anchor_in_context_training_collapses_under_the_strict_mask(qwen3, sequences, correct, anchor_bug):
    """The doctor's signature: the buggy drafter prefers the lenient mask, a correct one the strict mask."""
    bug_strict = replay_tau(anchor_bug[1], qwen3, sequences)
    bug_lenient = replay_tau(anchor_bug[1], qwen3, sequences, anchor_in_context=True)
    good_strict = replay_tau(correct[1], qwen3, sequences)
    good_lenient = replay_tau(correct[1], qwen3, sequences, anchor_in_context=True)
    assert bug_lenient >= 3.0 and bug_lenient - bug_strict >= 1.0, (bug_strict, bug_lenient)  # 2.07 / 3.95
    assert good_strict - good_lenient >= 1.0, (good_strict, good_lenient)  # 3.93 / 2.14


def test_dropped_tap_is_dead_weight(qwen3, sequences, drop_bug):
    path, drafter, _ = drop_bug
    width = drafter.spec.target_hidden_size
    fc = load_file(str(path / "model.safetensors"))["fc.weight"]
    assert fc.shape[1] == 3 * width  # still n_taps wide: "projection fed 4 of 5 layers"
    assert torch.count_nonzero(fc[:, width:2 * width]) == 0
    ids, prompt_len = sequences[0]
    feats = capture_taps(qwen3, ids, list(drafter.spec.taps)).taps
    anchors = list(range(prompt_len, ids.shape[0] - 1))

    def logits(features):
        return draft_logits(drafter, drafter.context(features), ids, anchors, [4] * len(anchors))

    full = logits(feats)
    torch.testing.assert_close(logits(zero_tap(1, width)(feats.clone())), full, rtol=1e-6, atol=1e-6)
    assert (logits(zero_tap(0, width)(feats.clone())) - full).abs().max() > 1.0  # live taps matter
    assert replay_tau(drafter, qwen3, sequences) >= 2.5


def test_shifted_taps_score_higher_on_the_layers_they_were_trained_on(qwen3, sequences, shift_bug):
    path, drafter, log = shift_bug
    assert drafter.spec.taps == (1, 2, 3) and log["taps_trained"] == [2, 3, 4]  # the record is wrong
    recorded = replay_tau(drafter, qwen3, sequences)
    shifted = replay_tau(drafter, qwen3, sequences, taps=[t + 1 for t in drafter.spec.taps])
    assert shifted >= 3.0 and shifted - recorded >= 0.5, (recorded, shifted)  # 3.06 / 3.93


def test_both_formats_load_back_with_identical_drafts(qwen3, sequences, both_formats):
    zlab, spec_dir = both_formats["zlab"], both_formats["speculators"]
    zlab_weights, spec_weights = load_file(str(zlab / "model.safetensors")), load_file(str(spec_dir / "model.safetensors"))
    for name, tensor in zlab_weights.items():  # two runs, same seed: identical bodies
        assert torch.equal(tensor, spec_weights[name]), name
    assert set(spec_weights) - set(zlab_weights) == {"embed_tokens.weight", "lm_head.weight"}
    config = json.loads((spec_dir / "config.json").read_text())
    assert config["speculators_config"]["verifier"]["name_or_path"] == str(qwen3.path)
    assert config["aux_hidden_state_layer_ids"] == [2, 3, 4]
    a, b = load(zlab, qwen3), load(spec_dir, qwen3)
    assert (a.spec.format, b.spec.format) == ("zlab", "speculators") and a.spec.taps == b.spec.taps
    ids, prompt_len = sequences[2]
    feats = capture_taps(qwen3, ids, list(a.spec.taps)).taps
    anchors = list(range(prompt_len, ids.shape[0] - 1))
    assert torch.equal(draft_logits(a, a.context(feats), ids, anchors, [4] * len(anchors)),
                       draft_logits(b, b.context(feats), ids, anchors, [4] * len(anchors)))
    log = json.loads((zlab / "train_log.json").read_text())
    assert log["config"]["steps"] == 40 and len(log["loss"]) == 40


def test_hybrid_target_trains(test_bed, tmp_path):
    target = load_target(str(test_bed["qwen3_5_text"]), device="cpu", dtype="float32")
    sequences = greedy_sequences(target, list(DEMO_PROMPTS[:8]), 32)
    path = train_drafter(target, sequences, fixture_config(steps=150), tmp_path / "hybrid")
    assert replay_tau(load(path, target), target, sequences) > 1.3  # measured 3.90


def test_impossible_bug_settings_are_refused(qwen3, sequences, tmp_path):
    with pytest.raises(ValueError, match="shifted by 3"):
        train_drafter(qwen3, sequences[:1], TrainConfig(shift_taps=3), tmp_path / "a")  # taps 4, 5, 6 of 6
    with pytest.raises(ValueError, match="drop_tap 3"):
        train_drafter(qwen3, sequences[:1], TrainConfig(drop_tap=3), tmp_path / "b")
    with pytest.raises(ValueError, match="format"):
        train_drafter(qwen3, sequences[:1], TrainConfig(), tmp_path / "c", fmt="hf")
