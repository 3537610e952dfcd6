"""Stage (trained-taps): a drafter on one training sample's fc input, scored teacher-forced as its trainer
scores it, into `run`'s rows (core/documents/row_documents.SampleRow documents the fields; `diff` reads them).

Anchors only where loss_mask == 1: each contiguous supervised stretch [s, e) is one unit, anchored at
s .. e - 2 (speculators select_anchors: loss_mask[a] == 1; DeepSpec build_anchor_candidate_mask also needs
loss_mask[a + 1]); slot j of anchor a is scored while a + j < e (speculators masks slot j by loss_mask[a + j];
DeepSpec build_eval_mask keeps a contiguous supervised prefix: the same for the accepted length). Blocks are
full size (training never shortens a block). The label at a + j is the teacher's argmax after a + j - 1 where
the format stores a teacher (speculators' targets = verifier logits at a + j - 1), else the data token (SpecForge
DFlash trains cross-entropy on the tokens). The walk runs over the stored text: a_{i+1} = a_i + n(a_i) + 1.
Everything else (the blocks, masks, drafts) is the engine's replay, unchanged.
"""

from __future__ import annotations

from typing import Any

import torch

from ..core.settings.run_settings import Scoring
from ..model.engine import replay
from .prompts import Prompt
from .rows import trajectory_row


def supervised_segments(loss_mask: list[int], minimum: int = 2) -> list[tuple[int, int]]:
    """[s, e) for every run of loss_mask == 1 at least `minimum` long (a shorter one has no scored slot)."""
    segments, start = [], None
    for p, m in enumerate([*loss_mask, 0]):
        if m and start is None:
            start = p
        elif not m and start is not None:
            if p - start >= minimum:
                segments.append((start, p))
            start = None
    return segments


def shifted_labels(tokens: torch.Tensor, predicted: torch.Tensor | None) -> torch.Tensor:
    """[T] the id each position is scored against: predicted[p - 1] (a teacher's next token after p - 1), or
    the data token itself when there is no teacher."""
    if predicted is None:
        return tokens.clone()
    labels = tokens.clone()
    labels[1:] = predicted[:-1].to(labels.dtype)
    return labels


def training_rows(drafter, name: str, fc_input: torch.Tensor, tokens: torch.Tensor, loss_mask: torch.Tensor,
                  labels: torch.Tensor, sample_id: str, prompt_set: str, anchor_batch: int | None = None
                  ) -> list[dict[str, Any]]:
    """One row per supervised stretch of the sample (prompt_id SAMPLE, or SAMPLE:K for its K-th stretch when it
    has several); each row's `label_ids` are what its drafts were scored against."""
    segments = supervised_segments(loss_mask.tolist())
    ctx = drafter.context(fc_input.to(drafter.fc.weight.device, drafter.fc.weight.dtype))
    rows = []
    for k, (s, e) in enumerate(segments):
        result = replay(drafter, None, tokens[:e], s, Scoring(e - s, "full", anchor_batch=anchor_batch), ctx=ctx[:e], labels=labels[:e])
        cont = tokens[s:e].tolist()
        label_ids = labels[s:e].tolist()
        agree = (sum(int(a == b) for a, b in zip(cont, label_ids)), len(cont))
        prompt = Prompt(sample_id if len(segments) == 1 else f"{sample_id}:{k}", "", prompt_set)
        row = trajectory_row(prompt, name, drafter.spec.block_size, result, s, cont, agree)
        row.update(label_ids=label_ids, training_sample=sample_id, segment=k)
        rows.append(row)
    return rows
