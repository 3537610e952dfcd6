"""Tree verification from the chain's own drafter pass: what DDTree's heap needs, read off the lm_head pieces.

Why here: `run --tree-budgets` must cost no extra drafter pass (core/tree.py says why one heap run per anchor
gives every budget). The chain already takes every drafted slot through the lm_head in pieces
(model/lm_head.py `greedy_ids`; DFlash2's candidates a row piece at a time); `ChunkTree.observe` sees each
piece of logits there and keeps, per row, only what the tree needs, so memory stays bounded by one chunk's
rows (never a top-k per anchor per depth for all anchors of a prompt):

- the float32 logsumexp over the whole vocabulary: a vocabulary in one piece (the test beds) is one
  `torch.logsumexp` of the row, as DDTree's `build_ddtree_tree` computes it; across pieces each piece's
  maximum and float32 sum of exp(x - max) are combined in float64 and rounded once (the sum's order differs
  from one whole-row reduction: a last-bit matter, within an ulp or two of the logsumexp);
- the top TOP_KEPT + 1 logits and their ids (the first piece's `topk`, then only the entries above the
  row's current last kept value, looked for only in the groups of GROUP entries whose maximum passes it,
  appended and compacted; one more than recall needs, so a rank below TOP_KEPT is decided unless it ties the
  last kept value), the target token's logit and, when a budget passes the kept entries, every group's
  maximum: the min(budget, vocab)-th largest of those is a logit value that at least that many logits reach,
  so a target token below it is outside every tree, decided without a second product;
- then, per row, the sorted log-probabilities (float32 top logits minus the logsumexp, as the reference) and
  the target's rank (core/tree.py: larger values, then equal ones with a smaller id).

When the heap of an anchor needs a rank past the TOP_KEPT kept for a depth (a budget above TOP_KEPT on a
flat distribution), or a rank is undecided (the target ties the last kept value), or a step's failure at a
budget above TOP_KEPT needs the exact rank, that row is computed again whole (`exact_rows`: its logits, the
logsumexp, the top min(budget, vocab) and the exact rank) and the anchor's heap runs again; all the row's
numbers then come from that second product, whose GEMM shape differs from the piece's (in bf16 its last bit
can differ, as with any change of anchor batch; in fp32 on the test beds the walks equal a live tree loop's).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F

from ..core.tree import BEYOND, NOT_CANDIDATE, NeedValues, TreeOnPrompt, pop_indices

TOP_KEPT = 64  # ranks decided from the pieces: recall@64 exact, a heap of <= 64 nodes needs no more (+1 kept)
GROUP = 64  # vocabulary entries per group maximum (the candidates' filter, the bound on far ranks)
TILE = 128  # rows per float32 pass over a piece: 128 x 4,096 fp32 = 2 MiB, near a core's cache
AMBIGUOUS = -3  # the target's logit equals the last kept value: its rank needs the whole row


def draft_ids_of(drafter, labels: torch.Tensor) -> torch.Tensor:
    """Target ids -> the drafter's vocabulary ids (its d2t map inverted), -1 where it has no such token."""
    labels = labels.to(torch.long)
    if not drafter.spec.has_d2t:
        return labels
    draft = torch.arange(drafter.d2t.shape[0], device=drafter.d2t.device)
    target = draft + drafter.d2t
    size = int(max(int(target.max()) + 1, int(labels.max()) + 1 if labels.numel() else 0))
    inverse = torch.full((size,), -1, dtype=torch.long, device=draft.device)
    inverse[target] = draft
    return torch.where(labels >= 0, inverse[labels.clamp(min=0).to(draft.device)].to(labels.device), labels)


class ChunkTree:
    """The tree's view of one chunk of anchors: the per-row accumulator the lm_head pieces feed (`observe`),
    then the heap per anchor (`finish`). Rows are laid out as the caller's lm_head reads them: `row_of[i][d]`
    is the row of anchor i's depth d + 1."""

    def __init__(self, rows: int, row_of: list[list[int]], targets: torch.Tensor, vocab: int, device,
                 max_budget: int | None = None):
        self.row_of, self.vocab, self.n = row_of, vocab, rows
        self.k = min(TOP_KEPT + 1, vocab)
        self.full = min(max_budget or 0, vocab)  # min(largest budget, vocab): the heap's top-k
        cap = 4 * self.k
        self.targets = targets.to(device)  # [rows] draft-vocabulary id of the target's token, -1: none
        self.lse = torch.full((rows,), float("-inf"), dtype=torch.float32, device=device)
        self.peak = torch.zeros(rows, dtype=torch.float64, device=device)  # pieces: the shift of `mass`
        self.mass = torch.zeros(rows, dtype=torch.float64, device=device)  # sum of exp(x - peak) so far
        self.pieces_lse = vocab > 0  # False once a piece held the whole vocabulary (its logsumexp is in `lse`)
        self.shifted = False  # some row's sums were shifted by its maximum (`peak` no longer all zero)
        self.values = torch.full((rows, cap), float("-inf"), dtype=torch.float32, device=device)
        self.ids = torch.full((rows, cap), -1, dtype=torch.long, device=device)
        self.fill = torch.zeros(rows, dtype=torch.long, device=device)
        self.threshold = torch.full((rows,), float("-inf"), dtype=torch.float32, device=device)
        self.target_logit = torch.full((rows,), float("nan"), dtype=torch.float32, device=device)
        groups = -(-vocab // GROUP)
        # every group's maximum, when a budget passes the kept entries: the full-th largest of them bounds the
        # full-th largest logit from below, so a target under it is outside every tree without a second product
        self.groups = (torch.full((rows, groups), float("-inf"), dtype=torch.float32, device=device)
                       if self.full > self.k and groups >= self.full else None)

    # -- the pieces -------------------------------------------------------------------------------

    @torch.inference_mode()
    def observe(self, rows: slice, vocab_start: int, logits: torch.Tensor) -> torch.Tensor:
        """One piece: rows `rows` x vocabulary [vocab_start, vocab_start + width) of the drafter's logits (after
        its output multiplier and softcap). The first piece of a row is the one at vocab_start 0; pieces start
        at multiples of GROUP (model/lm_head.py's widths are). The float32 passes (conversion, group maxima,
        the sum of exponentials) run TILE rows at a time, within the core's cache: over a whole piece they
        were slower than the lm_head's product itself (benchmarks/tree_cost.py). Returns the piece's row
        maxima (float32, the logits' own values), which the chain's argmax then needs not take again."""
        r0, width = rows.start, logits.shape[1]
        pad = (-width) % GROUP
        whole = vocab_start == 0 and width >= self.vocab  # the whole vocabulary in one piece
        maxima = torch.empty(logits.shape[0], (width + pad) // GROUP, dtype=torch.float32, device=logits.device)
        masses = torch.empty(logits.shape[0], dtype=torch.float32, device=logits.device)
        for t0 in range(0, logits.shape[0], TILE):
            x = logits[t0:t0 + TILE].to(torch.float32, copy=True)  # a copy: the passes below work in place
            n = x.shape[0]
            torch.amax((F.pad(x, (0, pad), value=float("-inf")) if pad else x).view(n, -1, GROUP), -1,
                       out=maxima[t0:t0 + n])
            if whole:
                self.lse[r0 + t0:r0 + t0 + n] = torch.logsumexp(x, -1)
                self.pieces_lse = False
            else:  # exp(x) unshifted: where the row's maximum lies in [-20, 60] no term that counts under- or
                torch.sum(x.exp_(), -1, out=masses[t0:t0 + n])  # overflows (checked below), one pass fewer
        row_max = maxima.amax(-1)
        if not whole:  # this piece's sums joined to the earlier pieces' in float64 (the logsumexp: `ranked`)
            top = row_max
            far = ((top <= -20) | (top >= 60)).nonzero()[:, 0]
            if far.numel() or self.shifted:
                tops = torch.zeros_like(top)
                if far.numel():  # those rows again, shifted by their maximum
                    tops[far] = top[far]
                    masses[far] = torch.exp(logits[far].float() - top[far, None]).sum(-1)
                    self.shifted = True
                tops = tops.double()
                peak = torch.maximum(self.peak[rows], tops)
                self.mass[rows] = (self.mass[rows] * torch.exp(self.peak[rows] - peak)
                                   + masses.double() * torch.exp(tops - peak))
                self.peak[rows] = peak
            else:
                self.mass[rows] += masses.double()
        if self.groups is not None:
            first = vocab_start // GROUP
            self.groups[rows, first:first + maxima.shape[1]] = maxima
        x = logits  # the piece itself: the entries read below are converted exactly, one at a time
        local = self.targets[rows] - vocab_start
        hit = ((local >= 0) & (local < width)).nonzero()[:, 0]
        if hit.numel():
            self.target_logit[r0 + hit] = x[hit, local[hit]].float()
        if vocab_start == 0:
            k = min(self.k, width)
            top, index = x.topk(k, -1)
            top = top.float()
            self.values[rows, :k], self.ids[rows, :k] = top, index
            self.fill[rows] = k
            if k == self.k:
                self.threshold[rows] = top[:, -1]
            return row_max
        threshold = self.threshold[rows]
        passing = (maxima > threshold[:, None]).nonzero()
        if not passing.numel():
            return row_max
        flat = (F.pad(x, (0, pad), value=float("-inf")) if pad else x).reshape(-1, GROUP)
        picked = flat.index_select(0, passing[:, 0] * maxima.shape[1] + passing[:, 1])  # whole groups: memcpys
        # compared in the logits' dtype: a threshold is a kept logit, so it converts back exactly
        above = picked > threshold[passing[:, 0], None].to(picked.dtype)
        inside = above.nonzero()
        found = picked[above].float()
        r = passing[inside[:, 0], 0]
        c = passing[inside[:, 0], 1] * GROUP + inside[:, 1]
        per_row = torch.bincount(r, minlength=x.shape[0])
        start = torch.cumsum(per_row, 0) - per_row
        slot = self.fill[rows][r] + torch.arange(r.numel(), device=r.device) - start[r]
        room = self.values.shape[1]
        fits = slot < room
        if not bool(fits.all()):  # more than the buffer holds in one piece: merge those rows whole
            over = torch.unique(r[~fits])
            merged, order = torch.cat([self.values[r0 + over], x[over].float()], 1).topk(self.k, -1)
            ids = torch.cat([self.ids[r0 + over], torch.arange(width, device=x.device).expand(over.numel(), -1)
                             + vocab_start], 1).gather(1, order)
            self._put(r0 + over, merged, ids)
            keep = ~torch.isin(r, over)
            r, c, slot, found = r[keep], c[keep], slot[keep], found[keep]
        self.values[r0 + r, slot] = found
        self.ids[r0 + r, slot] = c + vocab_start
        self.fill[rows] += torch.bincount(r, minlength=x.shape[0])
        grown = (self.fill[rows] > room - self.k).nonzero()[:, 0] + r0  # compacted when near full: the threshold
        if grown.numel():  # lags behind in between (more entries pass it), but few rows sort per piece
            top, order = self.values[grown].topk(self.k, -1)
            self._put(grown, top, self.ids[grown].gather(1, order))
        return row_max

    def _put(self, rows: torch.Tensor, top: torch.Tensor, ids: torch.Tensor) -> None:
        self.values[rows] = float("-inf")
        self.ids[rows] = -1
        self.values[rows, :self.k], self.ids[rows, :self.k] = top, ids
        self.fill[rows] = self.k
        self.threshold[rows] = top[:, -1]

    def ranked(self) -> tuple[list[list[float]], list[int]]:
        """Per row: the kept log-probabilities, sorted (float32 logits minus the logsumexp, as Python floats),
        and the target's rank (exact, BEYOND, AMBIGUOUS or NOT_CANDIDATE)."""
        if self.pieces_lse:  # rounded once, from the float64 sum of the pieces' float32 sums
            self.lse = (self.peak + torch.log(self.mass)).float()
        kept = torch.clamp(self.fill, max=self.k)
        top, order = self.values.topk(self.k, -1)
        ids = self.ids.gather(1, order)
        logprobs = top - self.lse[:, None]
        vt = self.target_logit
        last = top.gather(1, (kept - 1).clamp(min=0)[:, None])[:, 0]
        valid = torch.arange(self.k, device=top.device)[None, :] < kept[:, None]
        rank = ((top > vt[:, None]) & valid).sum(-1) + ((top == vt[:, None]) & valid & (ids < self.targets[:, None])).sum(-1)
        whole = kept >= self.vocab  # the row holds the whole vocabulary: every rank is known
        rank = torch.where(whole | (vt > last), rank,
                           torch.where(vt < last, torch.full_like(rank, BEYOND), torch.full_like(rank, AMBIGUOUS)))
        if self.groups is not None:  # under the full-th largest group maximum: at least `full` logits are larger
            beyond = (rank == BEYOND).nonzero()[:, 0]
            if beyond.numel():
                bound = self.groups[beyond].kthvalue(self.groups.shape[1] - self.full + 1, -1).values
                rank[beyond[vt[beyond] < bound]] = self.full  # stands for "rank >= full": outside every tree
        rank = torch.where((self.targets < 0) | vt.isnan(), torch.full_like(rank, NOT_CANDIDATE), rank)
        finite = torch.isfinite(logprobs[:, 0]) & torch.isfinite(self.lse)
        values = logprobs.tolist()
        counts = kept.tolist()
        return ([row[:n] if ok else [] for row, n, ok in zip(values, counts, finite.tolist())], rank.tolist())

    # -- the heaps ----------------------------------------------------------------------------------

    def finish(self, tree: TreeOnPrompt, scorable: Sequence[int], exact: Callable[[list[int], int], tuple]) -> None:
        """Each anchor's heap (core/tree.py `pop_indices`) to the largest budget, rows recomputed whole by
        `exact(rows, k)` (-> per row: sorted log-probabilities, exact rank) where the kept ones do not decide;
        appends each anchor's path nodes and ranks to `tree`. scorable[i]: anchor i's depths with a target."""
        max_budget = max(tree.budgets)
        full = min(max_budget, self.vocab)
        values, ranks = self.ranked()
        whole: dict[int, tuple[list[float], int]] = {}
        pending = {r for rows in self.row_of for r in rows if ranks[r] == AMBIGUOUS}
        results: list[list[int] | None] = [None] * len(self.row_of)
        todo = list(range(len(self.row_of)))
        while True:
            if pending:
                rows = sorted(pending)
                for r, got in zip(rows, exact(rows, full)):
                    whole[r] = got
                tree.deep_rows += len(rows)
                pending = set()
            again = []
            for i in todo:
                rows = self.row_of[i]
                row_values = [whole[r][0] if r in whole else values[r] for r in rows]
                depth_limit = next((d for d, v in enumerate(row_values) if not v), len(row_values))
                path = [whole[r][1] if r in whole else ranks[r] for r in rows[:scorable[i]]]
                try:
                    nodes = pop_indices(row_values[:depth_limit], path, max_budget, self.vocab)
                except NeedValues as need:
                    pending.add(rows[need.depth - 1])
                    again.append(i)
                    continue
                m = len(nodes)
                if m < len(path) and path[m] == BEYOND and full > len(row_values[m]):
                    pending.add(rows[m])  # the failure's kind at budgets past the kept ranks needs its rank
                    again.append(i)
                    continue
                results[i] = nodes
            if not pending:
                break
            todo = again
        for i, rows in enumerate(self.row_of):
            tree.path_nodes.append(results[i] or [])
            tree.ranks.append([whole[r][1] if r in whole else ranks[r] for r in rows[:scorable[i]]])


@torch.inference_mode()
def exact_rows(hidden: torch.Tensor, head: torch.nn.Module, transform, targets: torch.Tensor, rows: list[int],
               k: int) -> list[tuple[list[float], int]]:
    """Rows of `hidden` computed whole: (the top k float32 log-probabilities, sorted; the target's exact rank,
    larger logits then equal ones with a smaller id, NOT_CANDIDATE without a target), a row piece at a time."""
    from .lm_head import row_pieces

    index = torch.as_tensor(rows, device=hidden.device)
    picked = hidden[index]
    wanted = targets.to(hidden.device)[index]
    out: list[tuple[list[float], int]] = []
    for part in row_pieces(picked.shape[0], head, picked):
        logits = head(picked[part])
        x = (transform(logits) if transform is not None else logits).float()
        lse = torch.logsumexp(x, -1)
        top = x.topk(min(k, x.shape[1]), -1).values
        logprobs = (top - lse[:, None]).tolist()
        t = wanted[part]
        vt = x.gather(1, t.clamp(min=0)[:, None])
        ids = torch.arange(x.shape[1], device=x.device)[None, :]
        rank = (x > vt).sum(-1) + ((x == vt) & (ids < t[:, None])).sum(-1)
        rank = torch.where((t < 0) | vt[:, 0].isnan(), torch.full_like(rank, NOT_CANDIDATE), rank).tolist()
        finite = (torch.isfinite(lse) & torch.isfinite(top[:, 0])).tolist()
        out.extend((values if ok else [], r) for values, r, ok in zip(logprobs, rank, finite))
    return out


def draft_vocab(drafter) -> int:
    """Entries of the drafter's lm_head (its draft vocabulary, the target's unless a d2t map reduces it)."""
    weight = getattr(drafter.lm_head_table(), "weight", None)
    return int(weight.shape[0]) if isinstance(weight, torch.Tensor) and weight.dim() == 2 else int(drafter.spec.vocab_size)


class TreeReplay:
    """The tree side of one drafter's replay over one prompt (model/engine.py `replay` with tree budgets): per
    chunk of anchors a `ChunkTree` fed by the chain's lm_head pieces, its heaps run when the chunk is drafted,
    then the walks per budget (core/tree.py `walk_trees`). Only the chunk's rows are ever held."""

    def __init__(self, drafter, budgets: Sequence[int], labels: list[int], seq_len: int):
        self.drafter, self.labels, self.seq_len = drafter, labels, seq_len
        self.tree = TreeOnPrompt(tuple(sorted(set(budgets))), draft_vocab(drafter))
        self.scorable: list[int] = []
        self.view: ChunkTree | None = None

    def chunk(self, anchors: Sequence[int], lengths: Sequence[int], rows) -> Callable:
        """The observer for this chunk's lm_head pieces. rows: `draft_rows`' flat [N, H] (DFlash: every slot of
        every block, slot 0 included) or `draft_hidden`'s (hidden [A, L, H], valid) (DFlash2: the candidates'
        rows are slots 1..L-1 of every padded block)."""
        T = self.seq_len
        dflash2 = isinstance(rows, tuple)
        if dflash2:
            width = rows[0].shape[1] - 1
            self.hidden = rows[0][:, 1:].reshape(-1, rows[0].shape[-1])
            starts = [i * width - 1 for i in range(len(anchors))]  # row of depth d: start + d
        else:
            self.hidden = rows
            starts, offset = [], 0
            for length in lengths:
                starts.append(offset)
                offset += length
        row_of, targets = [], [-1] * int(self.hidden.shape[0])
        scorable = []
        for a, length, start in zip(anchors, lengths, starts):
            depths = list(range(1, length))
            row_of.append([start + d for d in depths])
            inside = min(length - 1, T - 1 - a)
            scorable.append(max(inside, 0))
            for d in depths[:max(inside, 0)]:
                targets[start + d] = self.labels[a + d]
        self.scorable.extend(scorable)
        self.chunk_scorable = scorable
        target_ids = draft_ids_of(self.drafter, torch.tensor(targets, dtype=torch.long))
        self.view = ChunkTree(int(self.hidden.shape[0]), row_of, target_ids, self.tree.vocab, self.hidden.device,
                              max(self.tree.budgets))
        return self.view.observe

    def finish_chunk(self) -> None:
        view, drafter = self.view, self.drafter
        head = drafter.lm_head_table()

        def exact(rows: list[int], k: int):
            return exact_rows(self.hidden, head, drafter.logit_transform, view.targets, rows, k)

        view.finish(self.tree, self.chunk_scorable, exact)
        self.view = self.hidden = None

    def walked(self, anchors: Sequence[int], prompt_len: int) -> TreeOnPrompt:
        from ..core.tree import walk_trees

        walk_trees(self.tree, anchors, self.scorable, prompt_len, self.seq_len)
        return self.tree
