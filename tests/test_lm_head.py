"""The lm_head in pieces (model/lm_head.py) gives exactly what the whole logits give.

Hand-made cases first: integer weights and rows make every logit an exact small integer, so ties are real
ties whatever the GEMM's order of summation, and the pieced argmax must return torch.argmax's first maximal
index on every row, for every cut of rows and vocabulary, with a bias, a softcap, NaN rows, a head that
cannot be sliced, and the GPU's piece sizes run on the CPU. Then on the test beds in fp32: the replay's
drafts and counts with the lm_head cut into many small pieces equal a straightforward whole-logits replay
(`drafter.logits(rows).argmax(-1)`, today's path before the pieces), for trained drafters on the dense and
the hybrid target, a reduced draft vocabulary (d2t) and an output multiplier with a softcap; the target's
greedy tokens and logit lens equal the whole-logits argmax too.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch import nn

from dflash_eval.core import batching
from dflash_eval.core.settings.run_settings import Scoring
from dflash_eval.model.lm_head import greedy_ids, row_pieces, sliceable


def _integer_head(vocab: int, hidden: int, seed: int, bias: bool = False, dtype=torch.float32) -> nn.Linear:
    g = torch.Generator().manual_seed(seed)
    head = nn.Linear(hidden, vocab, bias=bias)
    with torch.no_grad():
        head.weight.copy_(torch.randint(-2, 3, (vocab, hidden), generator=g).float())
        if bias:
            head.bias.copy_(torch.randint(-2, 3, (vocab,), generator=g).float())
    return head.to(dtype)


def _integer_rows(n: int, hidden: int, seed: int, dtype=torch.float32) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(-1, 2, (n, hidden), generator=g).float().to(dtype)


@pytest.mark.parametrize("pieces", [None, (1, 1), (3, 7), (5, 64), (64, 5), (1000, 1000)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("sparse", [True, False])  # the CPU's way and the accelerator's
def test_pieces_give_the_first_maximal_index_on_exact_ties(pieces, dtype, sparse):
    head = _integer_head(97, 8, seed=0, bias=True, dtype=dtype)
    rows = _integer_rows(41, 8, seed=1, dtype=dtype)
    logits = head(rows)
    maxima = logits == logits.max(-1, keepdim=True).values
    assert (maxima.sum(-1) > 1).sum() >= 10  # ties are the common case here, not an accident
    assert torch.equal(greedy_ids(rows, head, pieces=pieces, sparse=sparse), logits.argmax(-1))


def test_a_transform_is_applied_to_every_piece_before_the_max():
    head = _integer_head(50, 6, seed=2)
    rows = _integer_rows(9, 6, seed=3)
    def softcap(x):
        return torch.tanh(-x / 3.0) * 3.0  # decreasing: the argmax becomes the argmin
    expected = softcap(head(rows)).argmax(-1)
    assert torch.equal(greedy_ids(rows, head, softcap, pieces=(4, 8)), expected)
    assert not torch.equal(expected, head(rows).argmax(-1))


@pytest.mark.parametrize("sparse", [True, False])
def test_nan_wins_as_in_torch_argmax_wherever_its_piece_is(sparse):
    head = _integer_head(30, 4, seed=4)
    rows = _integer_rows(3, 4, seed=5)
    with torch.no_grad():
        head.weight[25] = float("nan")  # column 25 is NaN for every row: a late piece
    expected = head(rows).argmax(-1)
    assert expected.tolist() == [25, 25, 25]
    assert torch.equal(greedy_ids(rows, head, pieces=(2, 4), sparse=sparse), expected)
    with torch.no_grad():
        head.weight[2] = float("nan")  # and an earlier one: the first NaN wins
    assert torch.equal(greedy_ids(rows, head, pieces=(2, 4), sparse=sparse), head(rows).argmax(-1))
    assert head(rows).argmax(-1).tolist() == [2, 2, 2]


def test_a_head_that_cannot_be_sliced_is_called_whole_on_row_pieces(monkeypatch):
    head = nn.Sequential(_integer_head(40, 5, seed=6))  # not a plain nn.Linear: no vocabulary pieces
    rows = _integer_rows(11, 5, seed=7)
    assert not sliceable(head, rows)
    monkeypatch.setitem(batching.PIECE_WHOLE, "cpu", 3 * 40 * 4)  # three rows of whole-vocabulary logits
    assert [s.stop - s.start for s in row_pieces(11, head[0], rows)] == [3, 3, 3, 2]
    assert torch.equal(greedy_ids(rows, head), head(rows).argmax(-1))
    hooked = _integer_head(40, 5, seed=6)
    hooked._hf_hook = object()  # accelerate's offloading hook: the weight may not be where it says
    assert not sliceable(hooked, rows)


def test_the_gpu_piece_sizes_run_on_the_cpu():
    rows, vocab = 20000, 151936
    r, width = batching.lm_head_pieces(rows, vocab, 2, "cuda")
    assert (r, width) == (8192, 256 * 2**20 // (8192 * 2)) == (8192, 16384)
    assert batching.lm_head_pieces(rows, vocab, 2, "cpu") == (512, 4 * 2**20 // (512 * 2))  # 4,096 wide
    head = _integer_head(300, 8, seed=8)
    x = _integer_rows(70, 8, seed=9)
    scale = 300 / vocab  # the same shape of cut, shrunk to the tiny head
    assert torch.equal(greedy_ids(x, head, pieces=(max(1, int(r * 70 / rows)), max(1, int(width * scale)))),
                       head(x).argmax(-1))


# -- on the test beds, fp32 ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def small_pieces():
    """Every piece a few rows by a few dozen tokens, so a 522-token vocabulary is cut into many pieces."""
    saved = dict(batching.PIECE), dict(batching.PIECE_ROWS)
    batching.PIECE["cpu"], batching.PIECE_ROWS["cpu"] = 5 * 37 * 4, 5
    yield
    batching.PIECE.update(saved[0])
    batching.PIECE_ROWS.update(saved[1])


def whole_logits_drafts(drafter, taps, tokens, prompt_len, max_new, anchor_batch):
    """The straightforward path: every chunk's logits whole, then their argmax (as before the pieces)."""
    from dflash_eval.model.engine import anchor_chunks

    drafts = []
    for _chunk, lengths, rows in anchor_chunks(drafter, drafter.context(taps), tokens, prompt_len, max_new,
                                              anchor_batch=anchor_batch):
        ids = drafter.to_target_ids(drafter.logits(rows).argmax(-1)).tolist()
        offset = 0
        for length in lengths:
            drafts.append(ids[offset + 1: offset + length])
            offset += length
    return drafts


def _case(trained, drafter_dirs, which):
    from dflash_eval.formats.checkpoints import checked_spec
    from dflash_eval.formats.files import weight_files
    from dflash_eval.model.drafter import load_drafter
    from dflash_eval.model.target import load_target

    kind, path = {"dense": ("qwen3", trained["qwen3"]["good"]),
                  "hybrid": ("qwen3_5_text", trained["qwen3_5_text"]["good"]),
                  "d2t": ("qwen3", drafter_dirs["d2t"]), "softcap": ("qwen3", trained["qwen3"]["good"])}[which]
    target = load_target(str(trained[kind]["target"]), device="cpu", dtype="float32")
    spec, _ = checked_spec(path, target.info)
    if which == "softcap":
        spec = dataclasses.replace(spec, output_multiplier=1.7, logit_softcap=4.0)
    drafter = load_drafter(spec, weight_files(path)).attach_target(target.embed_tokens, target.lm_head)
    return target, drafter


@pytest.mark.parametrize("which", ["dense", "hybrid", "d2t", "softcap"])
def test_replay_drafts_and_counts_equal_the_whole_logits_path(which, trained, drafter_dirs, small_pieces):
    from dflash_eval.model.engine import NOT_SCORED, replay
    from dflash_eval.model.target import capture_taps
    from dflash_eval.pipeline.continuations import Prompt, generate_greedy, prompt_ids
    from dflash_eval.pipeline.prompts import DEMO_PROMPTS

    target, drafter = _case(trained, drafter_dirs, which)
    scored = 0
    for i, text in enumerate(DEMO_PROMPTS[:3]):
        ids = prompt_ids(target.tokenizer, Prompt(str(i), text), enable_thinking=False)
        tokens = torch.tensor(ids + generate_greedy(target, [ids], 24)[0])
        taps = capture_taps(target, tokens, list(drafter.spec.taps)).taps
        result = replay(drafter, taps, tokens, len(ids), Scoring(24, anchor_batch=6))
        assert result.drafts == whole_logits_drafts(drafter, taps, tokens, len(ids), 24, 6), f"{which} prompt {i}"
        T, truth = int(tokens.shape[0]), tokens.tolist()
        for a, block, correct, n in zip(result.anchors, result.drafts, result.slot_correct, result.accepted):
            expected = [int(block[j - 1] == truth[a + j]) if j < len(block) + 1 and a + j < T else NOT_SCORED
                        for j in range(1, drafter.spec.block_size)]
            assert correct == expected
            assert n == next((k for k, c in enumerate(expected) if c != 1), len(expected))
            scored += sum(c != NOT_SCORED for c in correct)
    assert scored > 100


def test_target_greedy_and_logit_lens_equal_the_whole_logits_argmax(trained, small_pieces):
    from dflash_eval.model.target import capture_taps, lens_tokens, load_target

    target = load_target(str(trained["qwen3"]["target"]), device="cpu", dtype="float32")
    tokens = torch.randint(0, target.info.vocab_size, (57,), generator=torch.Generator().manual_seed(0))
    capture = capture_taps(target, tokens, [1], keep_hidden=True)
    assert torch.equal(capture.greedy, target.lm_head(capture.hidden).argmax(-1))
    states = capture.hidden * 0.5
    norm = target.model.model.norm
    assert torch.equal(lens_tokens(target, states, chunk=16), target.lm_head(norm(states)).argmax(-1))
