"""A real step-by-step speculative-decoding loop: `--mode live`, and the oracle for the engine.

Each step drafts one block at the anchor (the last committed token), verifies it with one target forward
over the block using the KV/recurrent cache, accepts a prefix of the drafts and commits it plus one more
target token. It mirrors z-lab's `dflash_generate`, including the shorter block near the length cap:
- temperature 0: the drafts are the drafter's argmax, accepted while they equal the target's greedy
  tokens, and the bonus is the target's greedy token;
- temperature > 0 (`sampling.py`): the first token is sampled from the prefill, drafts are sampled from
  the drafter's processed distribution (policy `sample`, z-lab 0.1.0) or taken as its argmax (`argmax`),
  accepted by the rejection rule, and the next token comes from the residual or, after a full accept,
  from the target; every draw uses the generator of its (seed, prompt, sample).

Why snapshot/restore: HF's `DynamicCache.crop` does not roll back Gated-DeltaNet recurrent and conv state
(primer section 6), so a loop that crops after a partial accept is silently wrong on hybrid targets. We
snapshot the cache before verifying and, when a draft was rejected, restore it and re-run the accepted
tokens. One code path for dense and hybrid targets; the re-run costs one extra short forward per step.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field, replace

import torch

from ..core.semantics import draft_top_filters
from ..core.semantics import shorter_final_block as final_block_rule
from ..core.settings.run_settings import Scoring
from ..core.settings.work import Sampling
from .drafter import DFlashDrafter
from .drafting import draft_rows, walk_block
from .engine import block_length
from .sampling import draw, rejection_step, sampling_probs, to_target_vocab
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
    # parts of each step (speedup.py): the drafter's pass, and the target's verify forward over the block
    draft_seconds: list[float] = field(default_factory=list)
    verify_seconds: list[float] = field(default_factory=list)
    prefill_seconds: float = 0.0

    @property
    def continuation(self) -> list[int]:
        return self.tokens[self.prompt_len:]


def cuda_indices(*modules: torch.nn.Module, device: torch.device | None = None) -> list[int]:
    """The CUDA devices (indices) the modules' parameters and buffers live on, and `device`'s: what a
    clock read after their work must wait for (a target split over GPUs runs its layers on several)."""
    from .target import indexed_device

    devices = {t.device for m in modules for t in (*m.parameters(), *m.buffers())}
    devices |= {device} if device is not None else set()
    return sorted({indexed_device(d).index for d in devices if d.type == "cuda"})


def _sync(indices: list[int]) -> None:
    """Wait for the devices the loop's models use before reading a clock: those alone, never every
    visible GPU (under torchrun that made each rank create a context on all 8 GPUs, ~0.3-0.5 GB each)."""
    for index in indices:
        torch.cuda.synchronize(index)


@torch.inference_mode()
def live_generate(
    target: Target,
    drafter: DFlashDrafter,
    prompt: list[int],
    scoring: Scoring,
    *,
    sampling: Sampling = Sampling(),
    generator: torch.Generator | None = None,
) -> LiveResult:
    stops = set(stop_token_ids(target))
    taps = list(drafter.spec.taps)
    B = drafter.spec.block_size
    p = len(prompt)
    max_new_tokens = scoring.max_new_tokens
    cap_end = p + max_new_tokens
    shorter_final_block = final_block_rule(drafter.spec.semantics, scoring.shorter_final_block)  # vLLM: always full
    draft_sampling = sampling if draft_top_filters(drafter.spec.semantics) else replace(sampling, top_p=1.0, top_k=0)
    greedy = sampling.greedy
    devices = cuda_indices(target.model, drafter, device=target.device)  # once: what every clock read waits for
    if not greedy and generator is None:
        raise ValueError("live_generate at temperature > 0 needs a generator (sampling.generator_for)")
    result = LiveResult(prompt_len=p, tokens=list(prompt))
    started = time.perf_counter()
    # one device for everything the loop compares or draws from: the input embedding's, where the generator
    # lives (on a target split over GPUs the logits come back on the lm_head's device)
    home = target.device
    tap_states, logits, cache = cached_step(target, torch.tensor(prompt), taps, None, last_logits=True)
    logits = logits.to(home)
    vocab = logits.shape[-1]
    _sync(devices)
    result.prefill_seconds = time.perf_counter() - started
    ctx_rows = [drafter.context(tap_states)]  # context features for positions 0 .. anchor-1
    first = logits[-1].argmax(-1) if greedy else draw(sampling_probs(logits[-1:], sampling), generator)[0]
    result.tokens.append(int(first))
    a = p
    # a == len(tokens) after a step that accepted a stop token (no bonus follows it)
    while a < min(len(result.tokens), cap_end - 1) and result.tokens[a] not in stops:
        started = time.perf_counter()
        room = cap_end - 1 - a
        length = block_length(a, cap_end, B, shorter_final_block)
        ctx = torch.cat(ctx_rows)
        q = None
        if drafter.spec.is_dflash2:  # the serving walk (model/dflash2.py); q: the candidates' distribution
            walk_t = 0.0 if greedy or sampling.draft_policy == "argmax" else sampling.temperature
            drafted, q = walk_block(drafter, ctx, torch.tensor(result.tokens, device=ctx.device), a, length,
                                    walk_t, generator, vocab)
        else:
            slot_states = draft_rows(drafter, ctx, torch.tensor(result.tokens, device=ctx.device), [a], [length])[1:]
            if greedy or sampling.draft_policy == "argmax" or slot_states.shape[0] == 0:
                drafted = drafter.greedy_ids(slot_states).to(home)  # as the replay drafts (model/lm_head.py)
            else:
                slot_logits = drafter.logits(slot_states).to(home)
                q = to_target_vocab(drafter, sampling_probs(slot_logits, draft_sampling), vocab)
                drafted = draw(q, generator)
        drafts = drafted.tolist()
        _sync(devices)
        drafted_at = time.perf_counter()
        snapshot = copy.deepcopy(cache)
        block = [result.tokens[a], *drafts]
        verify_started = time.perf_counter()
        verify_taps, verify_logits, cache = cached_step(target, torch.tensor(block), taps, cache)
        verify_logits = verify_logits.to(home)
        _sync(devices)
        verified_at = time.perf_counter()
        if greedy:
            posterior = verify_logits.argmax(-1).tolist()
            n = 0
            while n < len(drafts) and drafts[n] == posterior[n]:
                n += 1
            following = posterior[n]
        elif drafts:
            n, following = rejection_step(drafted.to(home), q,
                                          sampling_probs(verify_logits, sampling), generator)
        else:  # a one-token block (at the cap): the target's next token only
            n, following = 0, int(draw(sampling_probs(verify_logits[-1:], sampling), generator)[0])
        for k in range(n):  # an accepted stop token ends the output there
            if drafts[k] in stops:
                n = k + 1
                break
        n = min(n, room)
        committed = drafts[:n]
        if n < room and not (committed and committed[-1] in stops):
            committed.append(following)  # the bonus token (or the residual's draw)
        result.tokens.extend(committed)
        ctx_rows.append(drafter.context(verify_taps[: n + 1]))  # positions a .. a+n now have taps
        if n + 1 < len(block):  # something was rejected: roll the cache back, re-run what was kept
            cache = snapshot
            _, _, cache = cached_step(target, torch.tensor(block[: n + 1]), taps, cache, last_logits=True)
        _sync(devices)
        result.walk_anchors.append(a)
        result.walk_accept_lengths.append(len(committed))
        result.walk_drafts.append(drafts)
        result.step_seconds.append(time.perf_counter() - started)
        result.draft_seconds.append(drafted_at - started)
        result.verify_seconds.append(verified_at - verify_started)
        a += n + 1
    end = len(result.tokens)
    for anchor, drafts in zip(result.walk_anchors, result.walk_drafts):
        result.walk_drafted.append(max(1, min(len(drafts), end - 1 - anchor)))
    return result
