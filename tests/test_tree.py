"""DDTree's tree, offline: the heap on hand-computed cases (budget counting, ties, the depth limit), against
the test oracle (tests/reference_ddtree.py `build_tree`) on random and tied logits, the walk per budget,
failures, recall, saturation, the lm_head-piece accumulator against whole rows, and the speedup table."""

from __future__ import annotations

import random

import pytest
import torch
from reference_ddtree import build_tree, follow_tree

from dflash_eval.core.errors import InputError
from dflash_eval.core.tree import (
    BEYOND,
    NOT_CANDIDATE,
    NeedValues,
    TreeOnPrompt,
    accepted_within,
    failure_of,
    parse_budgets,
    pop_indices,
    rank_counts,
    recall_by_depth,
    saturation_budget,
    walk_trees,
)

# two depths, three tokens: the pops by hand (logw after each push, as Python floats, all exact here):
#   1 (0,) -0.1 | 2 (0,0) -0.6 | 3 (0,1) -1.1 | 4 (1,) -2.0 | 5 (1,0) -2.5 | then (1,1) and (2,) tie at -3.0:
#   (1,1) < (2,) as tuples, so 6 (1,1) | 7 (2,) | 8 (2,0) -3.5 | 9 (2,1) -4.0 | 10 (0,2) -4.1 | ...
VALUES = [[-0.1, -2.0, -3.0], [-0.5, -1.0, -4.0]]


@pytest.mark.parametrize("path, budget, expected", [
    ([0, 0], 9, [1, 2]),
    ([0, 1], 9, [1, 3]),
    ([1, 1], 9, [4, 6]),  # the tie at -3.0 goes to the smaller rank tuple
    ([2, 0], 9, [7, 8]),
    ([0, 2], 9, [1]),  # (2,1) at -4.0 pops at 9, before (0,2) at -4.1
    ([0, 2], 10, [1, 10]),
    ([2, 1], 9, [7, 9]),
    ([2, 0], 7, [7]),  # budget counts drafted nodes: 7 pops, the root not counted
    ([2, 0], 6, []),
    ([1, 2], 9, [4]),  # (1,2) would pop later than 9
    ([NOT_CANDIDATE, 0], 9, []),
    ([0, NOT_CANDIDATE], 9, [1]),
    ([2, 0], 2, []),  # top-k = min(budget, vocab) = 2: rank 2 is no candidate
])
def test_heap_pops_by_hand(path, budget, expected):
    assert pop_indices(VALUES, path, budget, vocab=3) == expected


def test_budget_counts_nodes_and_the_tree_is_a_prefix_of_the_pops():
    nodes = pop_indices(VALUES, [1, 1], 9, vocab=3)
    assert [accepted_within(nodes, b) for b in range(1, 10)] == [0, 0, 0, 1, 1, 2, 2, 2, 2]
    # the same heap run to a smaller budget pops the same first nodes
    assert pop_indices(VALUES, [1, 1], 6, vocab=3) == [4, 6]
    assert pop_indices(VALUES, [1, 1], 5, vocab=3) == [4]


def test_depth_limit_and_missing_values():
    assert pop_indices(VALUES[:1], [0, 0], 9, vocab=3) == [1]  # one drafted slot: depth limit 1
    with pytest.raises(NeedValues) as need:  # rank 1 of depth 1 pops at 4: its sibling needs rank 2
        pop_indices([VALUES[0][:2], VALUES[1]], [2, 0], 9, vocab=3)
    assert (need.value.depth, need.value.rank) == (1, 2)
    # a path that is decided before the heap needs the missing value does not ask for it
    assert pop_indices([VALUES[0][:2], VALUES[1]], [0, 1], 9, vocab=3) == [1, 3]
    with pytest.raises(NeedValues):  # a rank past the known ones: the heap must see the missing value first
        pop_indices([VALUES[0][:2], VALUES[1]], [BEYOND, 0], 9, vocab=3)
    assert pop_indices([VALUES[0][:2], VALUES[1]], [BEYOND, 0], 2, vocab=3) == []  # top-k = 2: no candidate


def _ranks(logits: torch.Tensor, target: list[int]) -> list[int]:
    """The target's rank per depth: larger values, then equal ones with a smaller id."""
    out = []
    for d, t in enumerate(target):
        row = logits[d].float()
        out.append(int((row > row[t]).sum()) + int(((row == row[t]) & (torch.arange(row.numel()) < t)).sum()))
    return out


@pytest.mark.parametrize("tied", [False, True])
def test_heap_equals_the_reference_tree_on_random_logits(tied):
    """pop_indices on the sorted log-probabilities and the target's ranks = the node indices the oracle's
    tree gives the target's path, over random logits; `tied`: logits on a coarse grid (many exact ties, as
    bf16 logits have) with targets chosen among the top tokens, where only the id order of ties decides."""
    rng = random.Random(0)
    torch.manual_seed(0)
    checked = 0
    for case in range(300):
        depths, vocab = rng.randint(1, 5), rng.choice([3, 7, 40])
        logits = torch.randn(depths, vocab) * rng.choice([0.5, 2.0, 6.0])
        if tied:
            logits = (logits * 2).round() / 2
        budget = rng.choice([1, 2, 3, 4, 7, 8, 16, 33, 64])
        k = min(budget, vocab)
        # the oracle's topk must order ties by id for the comparison: a stable sort by value
        order = torch.sort(-logits, dim=-1, stable=True).indices
        target = [int(order[d, min(rng.randrange(0, 4), vocab - 1)]) for d in range(depths)]
        x = logits.float()
        lp = (torch.sort(x, -1, descending=True).values - torch.logsumexp(x, -1, keepdim=True)).tolist()
        ranks = [r if r < k else NOT_CANDIDATE for r in _ranks(logits, target)]
        ours = pop_indices([row[:k] for row in lp], ranks, budget, vocab)
        # the oracle: topk in a stable id order (torch.topk leaves ties unspecified: core/tree.py)
        top = torch.gather(x, 1, order[:, :k])
        tree = build_tree_sorted(top, order[:, :k], torch.logsumexp(x, -1, keepdim=True), budget)
        path, node = [], 0
        for d in range(depths):
            child = tree.children[node].get(target[d])
            if child is None:
                break
            path.append(child)
            node = child
        assert ours == path, (case, budget, ranks)
        checked += bool(path)
    assert checked > 100


def build_tree_sorted(top, ids, lse, budget):
    """The oracle's heap on given sorted top logits and their ids (build_tree with topk's order fixed)."""
    import heapq

    from reference_ddtree import Tree

    lp = (top - lse).tolist()
    ids = ids.tolist()
    children = [{}]
    tree = Tree([], [], [-1], children)
    heap = [(-lp[0][0], (0,), 0, 1, 0, lp[0][0])]
    topk = len(lp[0])
    while heap and len(tree.tokens) < budget:
        _, ranks, parent, depth, rank, logw = heapq.heappop(heap)
        index = len(tree.tokens) + 1
        tree.tokens.append(ids[depth - 1][rank])
        tree.depths.append(depth)
        children.append({})
        children[parent][ids[depth - 1][rank]] = index
        if rank + 1 < topk:
            value = logw - lp[depth - 1][rank] + lp[depth - 1][rank + 1]
            heapq.heappush(heap, (-value, ranks[:-1] + (rank + 1,), parent, depth, rank + 1, value))
        if depth < len(lp):
            value = logw + lp[depth][0]
            heapq.heappush(heap, (-value, ranks + (0,), index, depth + 1, 0, value))
    return tree


def test_the_oracle_builds_what_the_reference_describes():
    """build_tree on logits whose log-softmax is VALUES' shape: 7 nodes, the root's children by rank."""
    logits = torch.tensor([[3.0, 1.0, 0.0], [2.0, 1.5, -1.0]])
    tree = build_tree(logits, 7)
    assert len(tree.tokens) == 7 and tree.parents[0] == -1
    assert tree.depths[:2] == [1, 2] and tree.tokens[0] == 0
    path, bonus = follow_tree(tree, lambda node: [0, 1, 2, 2, 2, 2, 2, 2][node])
    assert path == [0, 1, tree.children[1][1]] and bonus == 2


def test_walk_per_budget_with_failures_and_the_end_clip():
    """Three anchors of a 5-token text (prompt 1): per anchor the path's pop indices and ranks."""
    tree = TreeOnPrompt(budgets=(1, 4), vocab=10)
    tree.path_nodes = [[1, 3], [2], []]
    tree.ranks = [[0, 1, 5], [1, 0], [NOT_CANDIDATE]]
    walk_trees(tree, anchors=[1, 2, 3], scorable=[3, 2, 1], prompt_len=1, seq_len=5)
    # budget 1: anchor 1 accepts 1 (node 3 > 1), commits 2 -> anchor 3: accepts 0 (no candidate), commits 1 -> 4 = end
    assert tree.walks[1]["walk_anchors"] == [1, 3]
    assert tree.walks[1]["walk_accept_lengths"] == [2, 1]
    assert tree.walks[1]["walk_failures"] == [0, 0]  # rank 1 >= min(1, 10): candidate; NOT_CANDIDATE: candidate
    # budget 4: anchor 1 accepts 2 (nodes 1, 3 <= 4), then depth 3's rank 5 >= 4: candidate; commits 3 -> 4
    assert tree.walks[4]["walk_anchors"] == [1]
    assert tree.walks[4]["walk_accept_lengths"] == [3]
    assert sum(tree.walks[4]["walk_accept_lengths"]) == 5 - 1 - 1  # continuation length - 1


@pytest.mark.parametrize("accepted, scorable, rank, budget, expected", [
    (2, 2, NOT_CANDIDATE, 16, "complete"), (0, 3, NOT_CANDIDATE, 16, "candidate"), (0, 3, 15, 16, "budget"),
    (0, 3, 16, 16, "candidate"), (1, 3, 3, 4, "budget"), (1, 3, 3, 3, "candidate"), (0, 3, BEYOND, 64, "candidate"),
    (0, 3, 5, 1024, "candidate"),  # a 5-token vocabulary: top-k = 5
])
def test_failure_kinds(accepted, scorable, rank, budget, expected):
    vocab = 5 if budget == 1024 else 100
    assert failure_of(accepted, scorable, rank, budget, vocab) == expected


def test_recall_and_saturation():
    counts = rank_counts([[0, 3, NOT_CANDIDATE], [5, 0], [70, BEYOND, 0], [1]], depths=3)
    assert counts == [[1, 1, 1, 0, 1, 0], [1, 1, 0, 0, 1, 0], [1, 0, 0, 0, 0, 1]]
    recall = recall_by_depth(counts)
    assert recall[0]["anchors"] == 4 and recall[0]["recall"] == {"1": 0.25, "4": 0.5, "16": 0.75, "64": 0.75}
    assert recall[2]["recall"]["64"] == 0.5
    assert saturation_budget({16: 2.0, 32: 2.5, 64: 2.52, 128: 2.53}) == 64  # 2.53 > 1.01 x 2.5
    assert saturation_budget({16: 3.0, 32: 2.99}) == 16
    assert saturation_budget({16: None}) is None


@pytest.mark.parametrize("text, expected", [("16,4, 4", (4, 16)), ("ddtree", (16, 32, 64, 128, 256, 512, 1024)),
                                            (None, ())])
def test_budgets_parse(text, expected):
    assert parse_budgets(text) == expected


@pytest.mark.parametrize("text", ["0", "16,x", "-4", "9000", ""])
def test_bad_budgets_are_refused_by_name(text):
    with pytest.raises(InputError, match="--tree-budgets"):
        parse_budgets(text)


def _drafter_head(vocab: int, hidden: int = 8, seed: int = 0):
    torch.manual_seed(seed)
    return torch.nn.Linear(hidden, vocab, bias=False)


@pytest.mark.parametrize("integer", [False, True])
def test_pieces_accumulate_what_whole_rows_give(integer):
    """ChunkTree fed by model/lm_head.greedy_ids in small vocabulary pieces = exact_rows on whole rows: the
    kept log-probabilities (to float32 rounding of the logsumexp's order), the same ranks, including ties
    (integer logits), ranks past the kept 64 (BEYOND) and a target outside the vocabulary."""
    from dflash_eval.model.lm_head import greedy_ids
    from dflash_eval.model.tree_scoring import AMBIGUOUS, TOP_KEPT, ChunkTree, exact_rows

    vocab, rows = 700, 40
    head = _drafter_head(vocab)
    hidden = torch.randn(rows, 8) * 3
    if integer:  # exact ties everywhere
        with torch.no_grad():
            head.weight.copy_(head.weight.mul(4).round())
        hidden = hidden.round()
    head.requires_grad_(False)
    logits = head(hidden)
    order = torch.sort(-logits, dim=-1, stable=True).indices
    targets = torch.tensor([int(order[r, [0, 1, 3, 63, 64, 200][r % 6]]) for r in range(rows)])
    targets[5] = -1
    view = ChunkTree(rows, [[r] for r in range(rows)], targets, vocab, "cpu")
    ids = greedy_ids(hidden, head, pieces=(7, 64), observe=view.observe)
    assert torch.equal(ids, logits.argmax(-1))  # the chain's argmax is untouched by the observer
    values, ranks = view.ranked()
    whole = exact_rows(hidden, head, None, targets, list(range(rows)), vocab)
    for r in range(rows):
        want_values, want_rank = whole[r]
        scale = 1 + float(logits[r].abs().max())  # the logsumexp's order of summation: an ulp or two of its size
        assert values[r] == pytest.approx(want_values[:TOP_KEPT + 1], abs=3e-7 * scale)
        if targets[r] < 0:
            assert ranks[r] == NOT_CANDIDATE
        elif want_rank < TOP_KEPT:
            assert ranks[r] == want_rank or (integer and ranks[r] == AMBIGUOUS), (r, ranks[r], want_rank)
        else:
            assert ranks[r] in (BEYOND, AMBIGUOUS)


def test_speedup_with_trees_by_hand():
    from dflash_eval.core.speedup import StepTimes, tree_speedup_table

    target = {(1, 1): 10.0, (1, 8): 12.0, (1, 17): 16.0, (1, 65): 40.0}
    drafter = {(1, 8): 2.0}
    times = StepTimes("file", "hand", lambda n, b: target.get((b, n)), lambda n, b: drafter.get((b, n)), batches=(1,))
    table = tree_speedup_table({7: 3.0}, {16: 4.0, 64: 5.0, 256: 6.0}, 8, times)
    rows = {(r["verification"], r["size"]): r for r in table["rows"]}
    assert rows[("chain", 7)]["speedup"] == [pytest.approx(3.0 * 10 / (12 + 2))]
    assert rows[("tree", 16)]["speedup"] == [pytest.approx(4.0 * 10 / (16 + 2))]  # verify 1 + 16, drafter B = 8 slots
    assert rows[("tree", 64)]["speedup"] == [pytest.approx(5.0 * 10 / (40 + 2))]
    assert rows[("tree", 256)]["speedup"] == [None]  # no step time for 257 tokens: never guessed
    assert table["best"] == [{"batch": 1, "verification": "tree", "size": 16, "speedup": pytest.approx(40 / 18)}]


def test_the_chain_s_argmax_is_the_same_with_the_tree_observing_in_bf16():
    """The observer hands the chain its row maxima (model/lm_head.py's sparse update reads them): in bf16, with
    near ties everywhere, the argmax with the tree observing equals the argmax without it, piece for piece."""
    from dflash_eval.model.lm_head import greedy_ids
    from dflash_eval.model.tree_scoring import ChunkTree

    vocab, rows = 5000, 48
    head = _drafter_head(vocab, hidden=32).to(torch.bfloat16).requires_grad_(False)
    hidden = torch.randn(rows, 32).to(torch.bfloat16)
    view = ChunkTree(rows, [[r] for r in range(rows)], torch.randint(0, vocab, (rows,)), vocab, "cpu", 1024)
    with torch.inference_mode():
        plain = greedy_ids(hidden, head, pieces=(16, 512), sparse=True)
        observed = greedy_ids(hidden, head, pieces=(16, 512), sparse=True, observe=view.observe)
    assert torch.equal(plain, observed) and torch.equal(plain, head(hidden).argmax(-1))
    values, ranks = view.ranked()
    assert all(len(v) == 65 for v in values) and len(ranks) == rows
