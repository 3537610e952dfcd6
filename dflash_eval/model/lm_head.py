"""The lm_head in pieces: the argmax over a real vocabulary without ever holding a chunk's full logits.

Why: the drafter pass drafts every slot of every anchor, and its lm_head over 151,936 (Qwen3) or 248,320
(Qwen3.5) tokens is most of its arithmetic. Computed whole, a chunk of R rows writes R x V logits (1.2 GB in
bf16 for 4,096 rows) to memory and reads them back for an argmax that does no arithmetic: on the CPU that
read-back, not the GEMM, was a quarter of the pass (issue 41). Here the product runs on pieces of rows x
vocabulary sized by `core.batching.lm_head_pieces` (on the CPU, to stay in cache), each reduced at once; on
the CPU a later piece's row maxima come first (a vectorised `amax`) and its indices only for the rows it
improves, a handful of the pieces per row.

`greedy_ids(hidden, head, transform)` equals `transform(head(hidden)).argmax(-1)`, ties included: a piece's
`max(-1)` returns the first maximal index within the piece, and a later piece replaces the running best only
when strictly greater (or NaN where the best is not: torch's argmax treats NaN as the maximum), so the first
maximal index over the whole vocabulary wins, as `torch.argmax` documents. Each logit is the same dot
product the whole product computes; a GEMM of another shape may round it differently in its last bit, so in
fp32 the drafts are identical (tested against the whole-logits path on the test beds) and in bf16 a near tie
may go the other way, as with any change of anchor batch. Where a caller needs more than the argmax
(DFlash2's top-K candidates), `row_pieces` gives it the rows a piece at a time, each with its whole
vocabulary; the offline estimate at temperature > 0 takes its rows 256 at a time (model/estimation.py).

Vocabulary pieces need the weight itself: a plain `nn.Linear` whose weight lives on the rows' device. Any
other head (accelerate's offloading hooks, a head on another GPU of a split target) is called as a module,
on row pieces only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch
import torch.nn.functional as F
from torch import nn

from ..core.batching import lm_head_pieces


def sliceable(head: nn.Module, like: torch.Tensor) -> bool:
    """Whether `head`'s weight can be cut into vocabulary pieces for rows like `like` (see the docstring)."""
    return (type(head) is nn.Linear and not hasattr(head, "_hf_hook") and head.weight.device == like.device
            and head.weight.device.type != "meta")


def _vocab(head: nn.Module) -> int | None:
    weight = getattr(head, "weight", None)
    return int(weight.shape[0]) if isinstance(weight, torch.Tensor) and weight.dim() == 2 else None


def row_pieces(rows: int, head: nn.Module, like: torch.Tensor) -> Iterator[slice]:
    """Slices of `rows` rows, each small enough for its whole-vocabulary logits to stay within the piece
    budget (`core.batching.lm_head_pieces` with the whole vocabulary as one piece)."""
    vocab = _vocab(head) or 1
    size, _ = lm_head_pieces(rows, vocab, like.element_size(), like.device.type, whole_vocab=True)
    for start in range(0, rows, size):
        yield slice(start, min(rows, start + size))


@torch.inference_mode()
def greedy_ids(hidden: torch.Tensor, head: nn.Module, transform: Callable[[torch.Tensor], torch.Tensor] | None = None,
               *, pieces: tuple[int, int] | None = None, sparse: bool | None = None,
               observe: Callable[[slice, int, torch.Tensor], None] | None = None) -> torch.Tensor:
    """[N, H] rows -> [N] long: `transform(head(hidden)).argmax(-1)`, a piece at a time. `transform` is
    element-wise (the drafter's output multiplier and softcap); `pieces` (rows, vocabulary) overrides the
    rule (tests and benchmarks); `sparse` (default: on the CPU) takes each later piece's row maxima first
    and its indices only for the rows it improves (a handful of the pieces per row), the accelerator's way
    (False) every row's index with a select, never waiting on the device; `observe(rows, vocab_start, logits)`
    sees every piece of (transformed) logits once, in the same loop (model/tree_scoring.py: the tree's numbers
    come from the chain's own product) and may return the piece's row maxima, which the sparse update then
    reads instead of taking them again (equal values: NaN where a row holds one, as `amax`)."""
    n = int(hidden.shape[0])
    out = torch.empty(n, dtype=torch.long, device=hidden.device)
    if n == 0:
        return out
    if not sliceable(head, hidden):
        for part in row_pieces(n, head, hidden):
            logits = head(hidden[part])
            logits = transform(logits) if transform else logits
            if observe is not None:
                observe(part, 0, logits)
            out[part] = logits.max(-1).indices.to(out.device)
        return out
    weight, bias = head.weight, head.bias
    vocab = int(weight.shape[0])
    rows, width = pieces or lm_head_pieces(n, vocab, hidden.element_size(), hidden.device.type)
    best = torch.empty(n, dtype=hidden.dtype, device=hidden.device)
    sparse = hidden.device.type == "cpu" if sparse is None else sparse
    # vocabulary outermost: each piece of the weight is read from memory once per chunk and stays in cache
    # while the row pieces pass over it; the running best is one value and one index per row
    for v0 in range(0, vocab, width):
        w = weight[v0:v0 + width]
        b = None if bias is None else bias[v0:v0 + width]
        for r0 in range(0, n, rows):
            logits = F.linear(hidden[r0:r0 + rows], w, b)
            if transform is not None:
                logits = transform(logits)
            # the observer may hand back the piece's row maxima (the same values, from its own pass)
            seen = observe(slice(r0, r0 + logits.shape[0]), v0, logits) if observe is not None else None
            held, ids = best[r0:r0 + rows], out[r0:r0 + rows]
            if v0 == 0:
                value, index = logits.max(-1)
                held.copy_(value), ids.copy_(index)
            elif sparse:  # the piece's maxima (a vectorised reduction), the index only where a row improves
                value = logits.amax(-1) if seen is None else seen.to(logits.dtype)  # exact: bf16 values
                better = ((value > held) | (value.isnan() & ~held.isnan())).nonzero()[:, 0]
                if better.numel():
                    held[better] = value[better]
                    ids[better] = logits[better].max(-1).indices + v0
            else:  # no host synchronisation per piece (an accelerator): every row's index, kept where better
                value, index = logits.max(-1)
                better = (value > held) | (value.isnan() & ~held.isnan())
                held.copy_(torch.where(better, value, held))
                ids.copy_(torch.where(better, index + v0, ids))
    return out
