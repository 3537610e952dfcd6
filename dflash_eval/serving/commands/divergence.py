"""The first token where a served greedy text leaves the offline greedy text, and what the target says there.

A served text that is not the offline greedy text (core/implausible.py `text_not_greedy`) is one of two things:
a near-tie the server's kernels tipped the other way (fused attention, other GEMM shapes, bf16 all move a
logit by a few bf16 steps), or a token the target clearly does not choose (a lossy speculation path: vllm
#54928, DFlash2 changed greedy output). The target's own logits at that token tell them apart: the gap
logit(offline token) - logit(served token), under NEAR_TIE a near-tie, above it a clear argmax the server did
not take. The run stores no logits, so `served --per-request --logit-gap` loads the run's target and runs one
forward per differing prompt over the prompt and the offline text up to that token (opt-in: it needs the
target's weights), on the CPU in the run's dtype.

Whatever the cause, every step after that token decodes another text: the served tau of the whole request is
not on the offline text, so the tau of the steps before it is given beside (per-step arrays required).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ...core.errors import InputError

# a near-tie: a few bf16 steps at the logit magnitudes of a served LM (2^-8 relative, 0.04-0.16 at 10-40)
NEAR_TIE = 0.5


def divergence_fields(served: list[int], offline: list[int], at: int) -> dict[str, Any]:
    """What the rest of the comparison is on once the texts part at token `at` (0-based in the output)."""
    return {"rest_on_different_text": True, "tokens_after": max(len(served) - at - 1, 0),
            "after_detail": f"every served token after token {at} ({max(len(served) - at - 1, 0)} of {len(served)}) "
                            "continues another text than the offline greedy one: the request's served tau is measured "
                            "partly on it"}


def logit_gaps(side, prompts, wanted: dict[str, int], served_tokens: dict[str, int]) -> dict[str, dict[str, Any]]:
    """prompt id -> the target's verdict at its first differing token: logits of the offline and the served
    token, their gap, whether the offline token is the target's argmax here, and the verdict under NEAR_TIE.
    `wanted`: prompt id -> the differing token's index in the output; `served_tokens`: the server's token there."""
    if not wanted:
        return {}
    import torch

    from ...model.target import load_target
    from ...pipeline.prompts import prompt_ids

    prov = side.run["provenance"]
    target_path = Path(prov["target"]["path"])
    try:
        target = load_target(str(target_path), device="cpu", dtype=str(prov.get("dtype") or "float32"))
    except InputError as exc:
        raise InputError(side.run_dir, f"--logit-gap loads the run's target: {exc.one_line()}") from None
    by_id = {p.id: p for p in prompts.prompts()}
    thinking = bool(prov.get("enable_thinking"))
    out = {}
    for pid, at in wanted.items():
        row = side.rows[pid]
        ids = list(prompt_ids(target.tokenizer, by_id[pid], thinking))
        if len(ids) != row["prompt_len"]:
            out[pid] = {"status": "unknown", "detail": f"the prompt templates to {len(ids)} tokens here, {row['prompt_len']} "
                                                       "in the run (another tokenizer or template): no logit gap"}
            continue
        context = ids + list(row["continuation_ids"][:at])  # the offline token `at` is predicted at the last position
        with torch.no_grad():
            logits = target.model(input_ids=torch.tensor([context])).logits[0, -1].float()
        offline_token, served_token = row["continuation_ids"][at], served_tokens[pid]
        gap = float(logits[offline_token] - logits[served_token])
        top = int(torch.argmax(logits))
        verdict = ("near-tie" if abs(gap) < NEAR_TIE else "clear argmax the server did not take" if gap > 0
                   else "the served token scores higher here")
        out[pid] = {"status": "measured", "logit_offline": float(logits[offline_token]),
                    "logit_served": float(logits[served_token]), "gap": gap, "near_tie_below": NEAR_TIE,
                    "offline_is_argmax": top == offline_token, "verdict": verdict,
                    "detail": f"target logits at token {at}: offline {float(logits[offline_token]):.3f}, served "
                              f"{float(logits[served_token]):.3f}, gap {gap:+.3f} ({verdict}; near-tie below "
                              f"{NEAR_TIE} logits; {target.dtype} on the CPU"
                              + ("" if top == offline_token else f"; the target's own argmax here is id {top}: its "
                                 "forward on this machine does not give the offline token either") + ")"}
    return out
