"""A real step-by-step greedy speculative-decoding loop: `--mode live`, and the oracle for the engine.

Each step drafts one block at the anchor (the last committed token), verifies it with one target forward
over the block using the KV/recurrent cache, accepts the leading drafts that equal the target's greedy
tokens, and commits them plus the target's bonus token. It mirrors z-lab's `dflash_generate`, including
the shorter block near the length cap.

Why snapshot/restore: HF's `DynamicCache.crop` does not roll back Gated-DeltaNet recurrent and conv state
(primer section 6), so a loop that crops after a partial accept is silently wrong on hybrid targets. We
snapshot the cache before verifying and, when a draft was rejected, restore it and re-run the accepted
tokens. One code path for dense and hybrid targets; the re-run costs one extra short forward per step.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field

import torch

from .drafter import DFlashDrafter
from .drafting import draft_logits
from .engine import block_length
from .target import Target, cached_step, stop_token_ids


@dataclass
class LiveResult:
    prompt_len: int
    tokens: list[int]  # prompt + committed continuation
    walk_anchors: list[int] = field(default_factory=list)
    walk_accept_lengths: list[int] = field(default_factory=list)  # tokens committed per step (z-lab's produced)
    walk_drafted: list[int] = field(default_factory=list)  # slots that could count (inside the output)
    walk_drafts: list[list[int]] = field(default_factory=list)  # drafted target ids per step
    step_seconds: list[float] = field(default_factory=list)
    prefill_seconds: float = 0.0

    @property
    def continuation(self) -> list[int]:
        return self.tokens[self.prompt_len:]


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@torch.inference_mode()
def live_generate(
    target: Target,
    drafter: DFlashDrafter,
    prompt: list[int],
    max_new_tokens: int,
    *,
    shorter_final_block: bool = True,
) -> LiveResult:
    stops = set(stop_token_ids(target))
    taps = list(drafter.spec.taps)
    B = drafter.spec.block_size
    p = len(prompt)
    cap_end = p + max_new_tokens
    result = LiveResult(prompt_len=p, tokens=list(prompt))
    started = time.perf_counter()
    tap_states, greedy, cache = cached_step(target, torch.tensor(prompt), taps, None)
    _sync(target.device)
    result.prefill_seconds = time.perf_counter() - started
    ctx_rows = [drafter.context(tap_states)]  # context features for positions 0 .. anchor-1
    result.tokens.append(int(greedy[-1]))
    a = p
    # a == len(tokens) after a step that accepted a stop token (no bonus follows it)
    while a < min(len(result.tokens), cap_end - 1) and result.tokens[a] not in stops:
        started = time.perf_counter()
        room = cap_end - 1 - a
        length = block_length(a, cap_end, B, shorter_final_block)
        ctx = torch.cat(ctx_rows)
        logits = draft_logits(drafter, ctx, torch.tensor(result.tokens, device=ctx.device), [a], [length])
        drafts = drafter.to_target_ids(logits.argmax(-1))[1:].tolist()
        snapshot = copy.deepcopy(cache)
        block = [result.tokens[a], *drafts]
        verify_taps, verify_greedy, cache = cached_step(target, torch.tensor(block), taps, cache)
        posterior = verify_greedy.tolist()
        n = 0
        while n < len(drafts) and drafts[n] == posterior[n]:
            n += 1
        for k in range(n):  # an accepted stop token ends the output there
            if drafts[k] in stops:
                n = k + 1
                break
        n = min(n, room)
        committed = drafts[:n]
        if n < room and not (committed and committed[-1] in stops):
            committed.append(posterior[n])  # the bonus token
        result.tokens.extend(committed)
        ctx_rows.append(drafter.context(verify_taps[: n + 1]))  # positions a .. a+n now have taps
        if n + 1 < len(block):  # something was rejected: roll the cache back, re-run what was kept
            cache = snapshot
            _, _, cache = cached_step(target, torch.tensor(block[: n + 1]), taps, cache)
        _sync(target.device)
        result.walk_anchors.append(a)
        result.walk_accept_lengths.append(len(committed))
        result.walk_drafts.append(drafts)
        result.step_seconds.append(time.perf_counter() - started)
        a += n + 1
    end = len(result.tokens)
    for anchor, drafts in zip(result.walk_anchors, result.walk_drafts):
        result.walk_drafted.append(max(1, min(len(drafts), end - 1 - anchor)))
    return result
