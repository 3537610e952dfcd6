"""Tree verification at temperature 0, offline and exact: DDTree's best-first tree, walked on-policy at every
budget from one drafter pass per anchor.

Why: servers now verify a *tree* of drafts per step (DDTree, liranringel/ddtree `ddtree.py`, and its ports),
and a drafter's tau under a tree is not its chain tau: a drafter whose second choices are right gains a lot,
one whose second choices are noise gains nothing. At T = 0 the committed text is the target's greedy
continuation y whatever is verified, so the accepted length of a step at anchor a is the longest prefix of
y[a+1:] that is a path of that step's tree, and the walk a_{i+1} = a_i + committed_i is exact, as for chains.

The reference's rules (read from `ddtree.py`, functions named; nothing copied):
- `ddtree_generate`: one drafter pass over the block [root, MASK x (B-1)] per step; its logits for slots
  1..B-1 are the tree's depths 1..B-1 (the depth limit is the number of drafted slots). The root is the last
  committed token (our anchor); it is not one of the budget's nodes: `budget` counts drafted nodes, and the
  verify forward reads 1 + budget tokens. `acceptance_lengths` holds len(accepted indices) = accepted drafts + 1
  (the root counts one, the bonus token's place), like z-lab's chain.
- `build_ddtree_tree`: per depth the top `min(budget, vocab)` log-probabilities of a float32 log-softmax over
  the whole vocabulary (top logits minus logsumexp). A heap (Python's `heapq`, a min-heap) holds entries
  (-logw, ranks, parent index, depth, rank, logw) where `ranks` is the tuple of per-depth ranks of the prefix
  and logw its log-probability, a Python float (IEEE double) computed incrementally: the first entry is depth
  1 rank 0 with logw = lp[1][0]; popping a node makes it node number count + 1 (the root is node 0) and pushes
  its next sibling when rank + 1 < topk, logw - lp[d][r] + lp[d][r + 1] evaluated left to right, and its first
  child when depth < the depth limit, logw + lp[d + 1][0]; it stops after `budget` pops or an empty heap.
  Ties: tuples compare element by element, so on equal -logw the entry with the lexicographically smaller
  rank tuple pops first (a prefix before its extensions, rank 0 before rank 1 at the first differing depth);
  rank tuples are unique, so the later fields never decide. `pop_indices` below runs this heap itself (same
  entries, same float operations in the same order), so even a key that the double arithmetic rounds
  differently from the exact sum decides as it does there.
- `follow_verified_tree`: from the root, follow the child whose token is the target's argmax at the current
  node while one exists; the accepted path plus the target's token there (the bonus) is committed.

Consequences used here: a node is pushed only after its parent (and its left sibling) popped, so the nodes
of the tree of budget b are exactly the first b nodes popped by the heap run to any larger budget (the
top-k cut at min(b, vocab) never matters: rank r at a depth needs r earlier pops of its left siblings). One
heap run to the largest budget per anchor therefore gives, for the target's path, the pop index of each
node; the tree of budget b holds a prefix of the path exactly up to the last node whose index is <= b.

Ranks: the target token's rank at a depth is the number of draft-vocabulary entries with a larger
log-probability plus those with an equal one and a smaller token id (torch.topk leaves the order of exact
ties unspecified, so a reference run can order such ties either way; we fix the id order and say so). Only the
sorted log-probabilities and this rank enter the heap: which of two tied tokens sits at rank r does not
change any key.

Where this module sits: model/tree_scoring.py extracts, per anchor and depth, the sorted top log-probabilities
and the target's rank from the drafter pass the chain already runs (its lm_head pieces), and calls
`pop_indices`; everything after (walks per budget, failures, recall by depth, documents) is here.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from . import metrics as M
from .errors import InputError

NOT_CANDIDATE = -1  # the target's token is not among the top min(budget, vocab) of its depth (or has no target)
BEYOND = -2  # the rank is at least the number of log-probabilities known for that depth (exact rank unknown)
RECALL_KS = (1, 4, 16, 64)  # recall@k by depth: the target's token within the drafter's top k
RANK_BUCKETS = ("1", "2-4", "5-16", "17-64", ">64", "none")  # rank + 1 in these ranges; none: not in the vocabulary
DDTREE_BUDGETS = (16, 32, 64, 128, 256, 512, 1024)  # the budgets DDTree's published table searched
MAX_BUDGET = 8192  # the largest budget accepted (the heap runs this many pops per anchor at most)
SATURATION_SHARE = 0.01  # a budget saturates when no larger one adds more than 1% to tau micro
FAILURES = ("candidate", "budget", "complete")


class NeedValues(Exception):
    """The heap needs the log-probability at `rank` of `depth` (1-based), past the ones it was given: the
    caller computes that depth's top list to the full `min(budget, vocab)` and runs the heap again."""

    def __init__(self, depth: int, rank: int):
        super().__init__(f"depth {depth} needs rank {rank}")
        self.depth, self.rank = depth, rank


def parse_budgets(text: str | None, flag: str = "--tree-budgets") -> tuple[int, ...]:
    """"16,32,64" or "ddtree" (DDTree's 16..1024) -> the sorted distinct budgets; () for None. InputError
    naming the flag for anything else (a budget counts drafted nodes, 1..MAX_BUDGET)."""
    if text is None:
        return ()
    spec = text.strip().lower()
    if spec == "ddtree":
        return DDTREE_BUDGETS
    values = []
    for part in spec.split(","):
        part = part.strip()
        if not part.isdigit():
            raise InputError(None, f"{flag} {text!r}: expected 'ddtree' or budgets b,b,... (positive integers: "
                                   f"drafted nodes per tree, the root not counted), got {part!r}")
        value = int(part)
        if not 1 <= value <= MAX_BUDGET:
            raise InputError(None, f"{flag} {text!r}: budget {value} outside 1..{MAX_BUDGET}")
        values.append(value)
    return tuple(sorted(set(values)))


def pop_indices(values: Sequence[Sequence[float]], path: Sequence[int], max_budget: int, vocab: int) -> list[int]:
    """The node index (1-based pop order; root = 0) of each node of the target's path that DDTree's heap
    (`build_ddtree_tree`) pops within `max_budget` pops, for depths 1, 2, ... while found.

    values[d - 1]: the sorted (descending) log-probabilities of depth d as Python floats (float32 values),
    at least its first entry, all min(max_budget, vocab) of them or a prefix (then NeedValues when the heap
    needs one more); len(values) is the depth limit. path[d - 1]: the target token's rank at depth d, or
    NOT_CANDIDATE, or BEYOND (>= len(values[d - 1])). The run stops early once the rest of the path cannot be
    popped within the budget (its next node is no candidate, or needs more pops than are left)."""
    depth_limit = len(values)
    topk = min(max_budget, vocab)
    if max_budget <= 0 or depth_limit == 0 or topk <= 0:
        return []
    found: list[int] = []

    def reachable(next_depth: int, parent_index: int) -> bool:
        """Whether the path's node at next_depth (1-based) can still pop within the budget."""
        if next_depth > depth_limit:
            return False
        rank = path[next_depth - 1] if next_depth - 1 < len(path) else NOT_CANDIDATE
        if rank == NOT_CANDIDATE:
            return False
        least = len(values[next_depth - 1]) if rank == BEYOND else rank
        if least >= topk:
            return False
        return parent_index + least + 1 <= max_budget  # its `least` left siblings pop after the parent, then it

    if not reachable(1, 0):
        return found
    wanted_parent, wanted_depth = 0, 1
    wanted_rank = path[0]
    first = values[0][0]
    heap: list[tuple[float, tuple[int, ...], int, int, int, float]] = [(-first, (0,), 0, 1, 0, first)]
    pop, push = heapq.heappop, heapq.heappush
    count = 0
    while heap and count < max_budget:
        _, ranks, parent, depth, rank, logw = pop(heap)
        count += 1
        if depth == wanted_depth and parent == wanted_parent and rank == wanted_rank:
            found.append(count)
            if not reachable(depth + 1, count):
                return found
            wanted_parent, wanted_depth = count, depth + 1
            wanted_rank = path[depth]
        row = values[depth - 1]
        if rank + 1 < topk:
            if rank + 1 >= len(row):
                raise NeedValues(depth, rank + 1)
            sibling = logw - row[rank] + row[rank + 1]
            push(heap, (-sibling, ranks[:-1] + (rank + 1,), parent, depth, rank + 1, sibling))
        if depth < depth_limit:
            child = logw + values[depth][0]
            push(heap, (-child, ranks + (0,), count, depth + 1, 0, child))
    return found


def accepted_within(nodes: Sequence[int], budget: int) -> int:
    """Drafts a tree of `budget` nodes accepts, from the path's pop indices: the prefix of indices <= budget
    (indices grow along the path, so this is a count)."""
    n = 0
    for index in nodes:
        if index > budget:
            break
        n += 1
    return n


def failure_of(accepted: int, scorable: int, rank_after: int, budget: int, vocab: int) -> str:
    """Why a step stopped: "complete" (it accepted every draft it could score: the depth limit or the end of
    the text), "candidate" (the target's next token is not among the top min(budget, vocab) of its depth:
    no tree of this budget could hold it) or "budget" (it is, but its prefix did not make the best-first cut).
    rank_after: the target token's rank at depth accepted + 1 (NOT_CANDIDATE when it has none)."""
    if accepted >= scorable:
        return "complete"
    if rank_after == NOT_CANDIDATE or rank_after == BEYOND or rank_after >= min(budget, vocab):
        return "candidate"
    return "budget"


def rank_bucket(rank: int) -> int:
    """Index into RANK_BUCKETS of a rank (0-based; NOT_CANDIDATE: not in the draft vocabulary)."""
    if rank < 0:
        return len(RANK_BUCKETS) - 1
    for i, top in enumerate(RECALL_KS):
        if rank < top:
            return i
    return len(RECALL_KS)


@dataclass
class TreeOnPrompt:
    """One drafter's tree results on one prompt (model/tree_scoring.py fills the per-anchor lists, `walks`
    the rest): per anchor the path's pop indices at the largest budget and the target's rank per depth."""

    budgets: tuple[int, ...]
    vocab: int
    path_nodes: list[list[int]] = field(default_factory=list)  # [anchor][accepted depth] -> node index
    ranks: list[list[int]] = field(default_factory=list)  # [anchor][depth - 1]: rank, NOT_CANDIDATE or BEYOND
    deep_rows: int = 0  # rows whose top list was computed to the full budget (exact second pass)
    walks: dict[int, dict[str, list[int]]] = field(default_factory=dict)  # budget -> walk (see `walk_trees`)


def walk_trees(tree: TreeOnPrompt, anchors: Sequence[int], scorable: Sequence[int], prompt_len: int,
               seq_len: int) -> None:
    """For each budget, the walk a0 = prompt_len, a_{i+1} = a_i + committed_i over the anchors' tree
    acceptances; committed = min(accepted + 1, tokens left after the anchor), as the chain's walk
    (model/engine.py `committed_tokens`: a walk's lengths sum to len(continuation) - 1). scorable[i]: the
    drafted depths of anchor i inside the text. Each step also records why it stopped (`failure_of`)."""
    first = anchors[0] if anchors else prompt_len
    for budget in tree.budgets:
        walk: dict[str, list[Any]] = {"walk_anchors": [], "walk_accept_lengths": [], "walk_drafted": [],
                                      "walk_failures": []}
        a = prompt_len
        while a < seq_len - 1:
            i = a - first
            n = min(accepted_within(tree.path_nodes[i], budget), scorable[i])
            committed = min(n + 1, seq_len - 1 - a)
            ranks = tree.ranks[i]
            after = ranks[n] if n < len(ranks) else NOT_CANDIDATE
            walk["walk_anchors"].append(a)
            walk["walk_accept_lengths"].append(committed)
            walk["walk_drafted"].append(max(scorable[i], 1))
            walk["walk_failures"].append(FAILURES.index(failure_of(n, scorable[i], after, budget, tree.vocab)))
            a += committed
        tree.walks[budget] = walk


def rank_counts(ranks: Sequence[Sequence[int]], depths: int) -> list[list[int]]:
    """[depth - 1][bucket] anchors whose target token's rank at that depth falls in each RANK_BUCKETS entry
    (teacher-forced: every anchor, whatever the earlier depths did); depths past the text are not counted."""
    out = [[0] * len(RANK_BUCKETS) for _ in range(depths)]
    for per_anchor in ranks:
        for d, rank in enumerate(per_anchor):
            if d < depths and rank != BEYOND:
                out[d][rank_bucket(rank)] += 1
            elif d < depths:  # BEYOND only arises past the first 64 ranks: beyond recall's largest k
                out[d][len(RECALL_KS)] += 1
    return out


def tree_row_entry(prompt_id: str, tree: TreeOnPrompt, block_size: int, anchors_first: int,
                   continuation_len: int) -> dict[str, Any]:
    """A samples.jsonl row's `tree`: per budget the walk, its failures and its counts; per anchor the path's
    node indices; the rank counts by depth (recall)."""
    expected = max(continuation_len - 1, 0)
    walks = {}
    for budget in tree.budgets:
        walk = tree.walks[budget]
        if sum(walk["walk_accept_lengths"]) != expected:
            raise RuntimeError(f"internal error: prompt {prompt_id}, tree budget {budget}: the walk commits "
                               f"{sum(walk['walk_accept_lengths'])} tokens, the continuation has {expected} after "
                               "the first")
        counts = M.AcceptanceCounts(block_size=block_size)
        if walk["walk_accept_lengths"]:
            counts = M.AcceptanceCounts.from_walk(prompt_id, [n - 1 for n in walk["walk_accept_lengths"]],
                                                  block_size, walk["walk_drafted"])
        failures = [0] * len(FAILURES)
        for code in walk["walk_failures"]:
            failures[code] += 1
        walks[str(budget)] = {**walk, "failures": dict(zip(FAILURES, failures)), "counts": counts.to_dict()}
    return {"budgets": list(tree.budgets), "vocab": tree.vocab, "first_anchor": anchors_first,
            "anchor_path_nodes": tree.path_nodes, "rank_counts": rank_counts(tree.ranks, block_size - 1),
            "deep_rows": tree.deep_rows, "walks": walks}


# ---------------------------------------------------------------------------------------------------
# the document: counts merged over prompts, metrics divided only here


def recall_by_depth(counts: Sequence[Sequence[int]]) -> list[dict[str, Any]]:
    """Per depth: anchors scored and recall@k = share of them whose target token is among the drafter's top k
    (k in RECALL_KS; recall@1 is the teacher-forced marginal of an argmax drafter up to argmax ties)."""
    out = []
    for d, row in enumerate(counts, start=1):
        total = sum(row)
        cumulative = [sum(row[:i + 1]) for i in range(len(RECALL_KS))]
        out.append({"depth": d, "anchors": total,
                    "recall": {str(k): (c / total if total else None) for k, c in zip(RECALL_KS, cumulative)},
                    "counts": list(row)})
    return out


def saturation_budget(taus: Mapping[int, float | None], share: float = SATURATION_SHARE) -> int | None:
    """The smallest budget after which no larger measured budget adds more than `share` (relative) to tau:
    tau(b') <= (1 + share) x tau(b) for every measured b' > b. None when no tau is known."""
    known = sorted((b, t) for b, t in taus.items() if t is not None)
    for i, (budget, tau) in enumerate(known):
        if all(later <= (1 + share) * tau for _, later in known[i + 1:]):
            return budget
    return None


def sum_rank_counts(parts: Sequence[Sequence[Sequence[int]]]) -> list[list[int]]:
    if not parts:
        return []
    depths = max(len(p) for p in parts)
    out = [[0] * len(RANK_BUCKETS) for _ in range(depths)]
    for part in parts:
        for d, row in enumerate(part):
            out[d] = [x + y for x, y in zip(out[d], row)]
    return out


def hybrid_note(model_type: str | None, layer_types: Sequence[str] | None) -> str | None:
    """The output's note for a target with recurrent layers: the math holds at T = 0, live ports refuse."""
    recurrent = [t for t in (layer_types or []) if t not in ("full_attention", "sliding_attention", "attention")]
    if not recurrent:
        return None
    return (f"the target ({model_type or 'hybrid'}) has {len(recurrent)} recurrent (linear-attention) layers: live "
            "DDTree verifiers support attention-only targets so far (a tree's branches cannot share one recurrent "
            "state); at temperature 0 the tree's accepted length is the longest prefix of the greedy continuation "
            "that is a path of the tree, whatever the verifier's layers, so these numbers are what a tree verifier "
            "that handles recurrent state per branch would measure")


DFLASH2_NOTE = ("DFlash2 drafter: the tree is DDTree's unary tree over the drafter's per-slot marginals (its "
                "logits); its own candidate selector scores pairs of consecutive tokens, and a tree built from "
                "those pairwise scores (as SGLang's DFlash2 tree PR proposes) is a different policy, not measured here")
POLICY = ("DDTree best-first tree (liranringel/ddtree ddtree.py: build_ddtree_tree, follow_verified_tree): per depth "
          "the top min(budget, vocab) float32 log-softmax values of one drafter pass over the block; `budget` "
          "nodes popped by sum of log-probabilities, ties to the smaller rank tuple; the root (last committed "
          "token) not counted; temperature 0, so accepted = the longest prefix of the greedy continuation on "
          "a path of the tree; tau counts the bonus token, committed tokens clipped at the end as the chain's")


def tree_document(rows: Sequence[Mapping[str, Any]], block_size: int, summarize, chain_metrics: Mapping[str, Any],
                  notes: Sequence[str] = ()) -> dict[str, Any] | None:
    """A drafter's run.json `tree` from its rows (prompt order): per budget the walks' counts merged over
    prompts and their metrics (`summarize`: counts -> Metrics, core.documents.results.metrics_summary), the failures,
    tau's gain over the chain, the saturation budget and recall by depth. None without tree rows."""
    trees = [r["tree"] for r in rows if r.get("tree")]
    if not trees:
        return None
    budgets = sorted({b for t in trees for b in t["budgets"]})
    missing = [r["prompt_id"] for r in rows if not r.get("tree") or sorted(r["tree"]["budgets"]) != budgets]
    if missing:
        raise ValueError(f"prompt {missing[0]} has no tree walk at every budget {budgets}")
    by_budget = []
    chain_macro = chain_metrics.get("tau_macro")
    for budget in budgets:
        counts = M.AcceptanceCounts(block_size=block_size)
        failures = dict.fromkeys(FAILURES, 0)
        for r in rows:
            walk = r["tree"]["walks"][str(budget)]
            counts = counts + M.AcceptanceCounts.from_dict(walk["counts"])
            for key in FAILURES:
                failures[key] += int(walk["failures"][key])
        metrics = summarize(counts)
        stopped = failures["candidate"] + failures["budget"]
        by_budget.append({
            "budget": budget, "verify_tokens": 1 + budget, "metrics": metrics, "counts": counts.to_dict(),
            "failures": failures,
            "candidate_share": failures["candidate"] / stopped if stopped else None,
            "gain_over_chain": (metrics["tau_macro"] - chain_macro
                                if metrics.get("tau_macro") is not None and chain_macro is not None else None)})
    taus = {e["budget"]: e["metrics"].get("tau_micro") for e in by_budget}
    return {"policy": POLICY, "budgets": budgets,
            "by_budget": by_budget,
            "saturation": {"budget": saturation_budget(taus),
                           "rule": f"the smallest budget no larger measured budget beats by more than "
                                   f"{100 * SATURATION_SHARE:.0f}% in tau micro (beyond the largest budget: not measured)"},
            "recall_by_depth": recall_by_depth(sum_rank_counts([t["rank_counts"] for t in trees])),
            "deep_rows": sum(int(t.get("deep_rows", 0)) for t in trees),
            "notes": list(notes)}

