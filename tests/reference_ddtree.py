"""Test-only oracle: DDTree's tree and a live DDTree-style speculative-decoding loop on the tiny test beds.

Written from the reference's rules (liranringel/ddtree `ddtree.py`), not copied:
- `build_tree` follows `build_ddtree_tree`: torch.topk(min(budget, vocab)) of the float32 logits per depth,
  minus torch.logsumexp over the whole vocabulary; a `heapq` of (-logw, ranks, parent, depth, rank, logw),
  popping `budget` nodes (the root, index 0, not counted), each pop pushing its next sibling
  (logw - lp[rank] + lp[rank + 1]) and its first child (logw + lp[next depth][0]).
- `follow_tree` follows `follow_verified_tree`: from the root, the child holding the target's argmax.
- `ddtree_loop` follows `ddtree_generate`: one drafter pass over [anchor, MASK, ...] per step, the tree, one
  verify, the accepted path plus the target's next token committed. Two verifiers:
  * dense (attention-only) targets: ONE target forward over [root, nodes...] with a 4-D float attention mask
    (the committed cache visible to all, inside the tree a node sees itself and its ancestors), positions
    anchor + depth; then the KV cache keeps the accepted path only: the new window's rows at the accepted
    node indices are moved to its front and the cache is cropped to anchor + len(path) (as `ddtree_generate`
    compacts its DynamicCache), and the drafter's context gets the taps of those rows;
  * hybrid targets (Gated-DeltaNet layers): a tree cannot share one recurrent state across branches, so the
    verifier walks the tree along the target's own path: the root, then each accepted node, one token per
    forward with the cache (the recurrent and KV state advance exactly along the accepted path), until the
    target's token is not a child of the current node; that token is the bonus. The posterior this reads at
    every visited node is the one a tree-masked forward would give there (each node's prefix is the same
    text), and no state of a rejected branch ever enters the cache, so nothing is rolled back.
  The loop ends and clips as `model/live.py` (z-lab's accounting): an accepted stop token ends the output,
  the last step commits only what is left before the cap, and with `shorter_final_block` the block shrinks
  near the cap, as the replay's; `acceptance` per step is the tokens committed.
Ties among drafted tokens: torch.topk's order, as the reference; the offline side orders exact ties by id
(core/tree.py), which on the fp32 test beds never decides.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

import torch

from dflash_eval.model.drafting import draft_hidden, draft_rows
from dflash_eval.model.engine import block_length
from dflash_eval.model.target import cache_keyword, cached_step, hooked_layers, output_cache, stop_token_ids


@dataclass
class Tree:
    tokens: list[int]  # drafted token per node 1..n (target ids)
    depths: list[int]
    parents: list[int]  # parents[i] of node i (node 0 = root: -1)
    children: list[dict[int, int]]  # node -> {token: child node}


def build_tree(logits: torch.Tensor, budget: int, to_target=None) -> Tree:
    """`build_ddtree_tree` on one block's draft logits [depths, vocab] (rows = slots 1..L-1)."""
    children: list[dict[int, int]] = [{}]
    tree = Tree([], [], [-1], children)
    if budget <= 0 or logits.shape[0] == 0:
        return tree
    x = logits.float()
    topk = min(budget, x.shape[-1])
    top, ids = torch.topk(x, k=topk, dim=-1)
    lp = (top - torch.logsumexp(x, dim=-1, keepdim=True)).tolist()
    ids = ids if to_target is None else to_target(ids)
    ids = ids.tolist()
    limit = x.shape[0]
    heap = [(-lp[0][0], (0,), 0, 1, 0, lp[0][0])]
    while heap and len(tree.tokens) < budget:
        _, ranks, parent, depth, rank, logw = heapq.heappop(heap)
        token = ids[depth - 1][rank]
        index = len(tree.tokens) + 1
        tree.tokens.append(token)
        tree.depths.append(depth)
        tree.parents.append(parent)
        children.append({})
        children[parent][token] = index
        if rank + 1 < topk:
            value = logw - lp[depth - 1][rank] + lp[depth - 1][rank + 1]
            heapq.heappush(heap, (-value, ranks[:-1] + (rank + 1,), parent, depth, rank + 1, value))
        if depth < limit:
            value = logw + lp[depth][0]
            heapq.heappush(heap, (-value, ranks + (0,), index, depth + 1, 0, value))
    return tree


def follow_tree(tree: Tree, posterior) -> tuple[list[int], int]:
    """`follow_verified_tree`: (accepted node indices, root first; the target's token after the last)."""
    path, node = [0], 0
    token = int(posterior(0))
    while token in tree.children[node]:
        node = tree.children[node][token]
        path.append(node)
        token = int(posterior(node))
    return path, token


def visibility(tree: Tree) -> torch.Tensor:
    n = 1 + len(tree.tokens)
    seen = torch.zeros(n, n, dtype=torch.bool)
    seen[0, 0] = True
    for i in range(1, n):
        seen[i, :i] = seen[tree.parents[i], :i]
        seen[i, i] = True
    return seen


@dataclass
class LoopResult:
    tokens: list[int]
    accept_lengths: list[int] = field(default_factory=list)  # tokens committed per step
    anchors: list[int] = field(default_factory=list)


def draft_logits_at(drafter, ctx, tokens: list[int], anchor: int, length: int) -> torch.Tensor:
    """The drafter's logits for slots 1..length-1 of the block at `anchor` (one block per forward)."""
    ids = torch.tensor(tokens, device=ctx.device)
    if drafter.spec.is_dflash2:
        hidden, _ = draft_hidden(drafter, ctx, ids, [anchor], [length])
        return drafter.logits(hidden[0, 1:length])
    return drafter.logits(draft_rows(drafter, ctx, ids, [anchor], [length])[1:])


def compact(cache, past: int, keep: list[int]) -> None:
    """Keep the rows `keep` of the window appended after `past` (the accepted path), then crop."""
    index = torch.tensor(keep, dtype=torch.long)
    total = cache.get_seq_length()
    for layer in cache.layers:
        for name in ("keys", "values"):
            tensor = getattr(layer, name, None)
            if tensor is None or tensor.numel() == 0:
                continue
            window = tensor[..., past:, :].index_select(-2, index.to(tensor.device))
            tensor[..., past:past + len(keep), :] = window
    if total > past + len(keep):  # a negative count removes that many tokens on every supported transformers
        cache.crop(-(total - past - len(keep)))


@torch.inference_mode()
def tree_verify_dense(target, taps: list[int], cache, root: int, tree: Tree, anchor: int):
    """One forward over [root, nodes] under the tree mask: (taps [n, ...], argmax per node, cache)."""
    n = 1 + len(tree.tokens)
    ids = torch.tensor([[root, *tree.tokens]], device=target.device)
    positions = torch.tensor([[anchor, *(anchor + d for d in tree.depths)]], device=target.device)
    dtype = next(target.model.parameters()).dtype
    mask = torch.zeros(1, 1, n, anchor + n, dtype=dtype, device=target.device)
    mask[0, 0, :, anchor:] = torch.where(visibility(tree).to(target.device), 0.0, torch.finfo(dtype).min)
    with hooked_layers(target, taps) as read_taps:
        out = target.model(input_ids=ids, position_ids=positions, attention_mask=mask, use_cache=True,
                           **{cache_keyword(target.model): cache})
        states = read_taps()
    return states, out.logits[0].argmax(-1).tolist(), output_cache(out)


@torch.inference_mode()
def ddtree_loop(target, drafter, prompt: list[int], max_new_tokens: int, budget: int, *, hybrid: bool,
                shorter_final_block: bool = True) -> LoopResult:
    """The live loop at one budget (module docstring); the tokens and committed lengths per step."""
    stops = set(stop_token_ids(target))
    taps = list(drafter.spec.taps)
    B = drafter.spec.block_size
    p = len(prompt)
    cap_end = p + max_new_tokens
    to_target = drafter.to_target_ids if drafter.spec.has_d2t else None
    tap_states, logits, cache = cached_step(target, torch.tensor(prompt), taps, None)
    result = LoopResult(tokens=list(prompt))
    result.tokens.append(int(logits[-1].argmax(-1)))
    ctx_rows = [drafter.context(tap_states)]
    a = p
    while a < min(len(result.tokens), cap_end - 1) and result.tokens[a] not in stops:
        room = cap_end - 1 - a
        length = block_length(a, cap_end, B, shorter_final_block)
        ctx = torch.cat(ctx_rows)
        tree = build_tree(draft_logits_at(drafter, ctx, result.tokens, a, length), budget, to_target)
        root = result.tokens[a]
        if hybrid:  # walk the tree along the target's path, one token per forward (module docstring)
            path, rows, node, token = [0], [], 0, root
            while True:
                states, step_logits, cache = cached_step(target, torch.tensor([token]), taps, cache)
                rows.append(states)
                following = int(step_logits[-1].argmax(-1))
                child = tree.children[node].get(following)
                if child is None:
                    break
                path.append(child)
                node, token = child, following
            accepted_taps = torch.cat(rows)
        else:
            states, posterior, cache = tree_verify_dense(target, taps, cache, root, tree, a)
            path, following = follow_tree(tree, posterior.__getitem__)
            compact(cache, a, path)
            accepted_taps = states[torch.tensor(path, device=states.device)]
        drafts = [tree.tokens[i - 1] for i in path[1:]]
        n = len(drafts)
        for k in range(n):  # an accepted stop token ends the output there
            if drafts[k] in stops:
                n = k + 1
                break
        n = min(n, room)
        committed = drafts[:n]
        if n < room and not (committed and committed[-1] in stops):
            committed.append(following)
        result.tokens.extend(committed)
        ctx_rows.append(drafter.context(accepted_taps[: n + 1]))
        result.anchors.append(a)
        result.accept_lengths.append(len(committed))
        a += n + 1
    return result
