"""Stage 1, continuations: the target's greedy continuation of every prompt, cached on disk (or the ones
given with `--responses`, validated in inputs.py).

Why a cache: at temperature 0 the committed text of speculative decoding *is* the target's greedy
continuation (primer section 5), so it is generated once per (target weights, tokenizer, chat template,
prompt, thinking flag, max_new_tokens) and reused by every later run and every drafter. Generation is
the most expensive step of a run on a large target.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from pathlib import Path

import torch

from ..core.errors import InputError
from ..core.options import default_cache_dir  # noqa: F401  (re-exported: where continuations are cached)
from .prompts import Prompt, chat_text, prompt_ids  # noqa: F401  (re-exported for callers of this stage)
from ..model.target import Target, stop_token_ids  # noqa: F401


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def tokenizer_hash(tokenizer) -> str:
    """Hash of the vocabulary and merges (tokenizer.json as the backend serializes it)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    text = backend.to_str() if backend is not None else json.dumps(tokenizer.get_vocab(), sort_keys=True)
    return sha256_text(text)


def chat_template_hash(tokenizer) -> str:
    return sha256_text(tokenizer.chat_template or "")


def cut_at_stop(tokens: Sequence[int], stops: Sequence[int]) -> list[int]:
    """Keep tokens up to and including the first stop token."""
    out = []
    for token in tokens:
        out.append(int(token))
        if token in stops:
            break
    return out


class ContinuationCache:
    """One small JSON file per continuation, named by the hash of everything it depends on."""

    def __init__(self, directory: Path | None):
        self.directory = directory

    @staticmethod
    def key(target: Target, prompt_text: str, enable_thinking: bool, max_new_tokens: int) -> str:
        parts = [target.fingerprint(), tokenizer_hash(target.tokenizer), chat_template_hash(target.tokenizer),
                 prompt_text, str(enable_thinking), str(max_new_tokens)]
        return sha256_text("\x1f".join(parts))

    def get(self, key: str) -> list[int] | None:
        if self.directory is None:
            return None
        path = self.directory / f"{key}.json"
        try:
            return [int(t) for t in json.loads(path.read_text())["continuation"]]
        except (OSError, json.JSONDecodeError, KeyError, TypeError, ValueError):
            return None  # absent or damaged entries are simply regenerated

    def put(self, key: str, continuation: list[int]) -> None:
        if self.directory is None:
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        tmp = self.directory / f".{key}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps({"continuation": continuation}))
        tmp.replace(self.directory / f"{key}.json")


@torch.inference_mode()
def generation_batch_size(target: Target, prompt_lengths: Sequence[int], max_new_tokens: int) -> int:
    """Prompts generated together when `--generation-batch` is not given.

    CPU: 8 (on the fp32 test targets, dense and Gated-DeltaNet, batched output equals one-at-a-time
    output token for token: tests/test_generation.py). CUDA: as many as half the free memory holds, from
    the KV cache of the attention layers and the recurrent state of the Gated-DeltaNet ones at the longest
    prompt + max_new_tokens, plus one step of logits; at most 64."""
    if target.device.type != "cuda":
        return 8
    config = target.model.config.get_text_config()
    layers = config.num_hidden_layers
    types = list(getattr(config, "layer_types", None) or ["full_attention"] * layers)
    attention_layers = sum(1 for t in types if t != "linear_attention")
    heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    length = max(prompt_lengths, default=0) + max_new_tokens
    element = torch.finfo(target.dtype).bits // 8
    kv = 2 * attention_layers * heads * head_dim * length * element
    recurrent = (layers - attention_layers) * 4 * config.hidden_size * head_dim * 4  # generous fp32 state
    logits = config.vocab_size * 4 * 2
    free, _ = torch.cuda.mem_get_info(target.device)
    return int(max(1, min(64, (free // 2) // max(1, kv + recurrent + logits))))


def generate_greedy(target: Target, prompts: list[list[int]], max_new_tokens: int, batch_size: int = 1) -> list[list[int]]:
    """The target's greedy continuations (cut after the first stop token), `batch_size` prompts at a time,
    in the order given.

    Prompts are grouped by length (least padding) and left-padded with an attention mask: attention
    layers mask the pads, Gated-DeltaNet layers zero them before the recurrence (HF's
    `apply_mask_to_padding_states`), and positions count from each prompt's first real token, so a prompt
    generates the same tokens in a batch as alone (tested on fp32 CPU, dense and hybrid targets; the run's
    self-consistency figure checks every continuation against one full forward anyway)."""
    stops = stop_token_ids(target)
    pad = target.tokenizer.pad_token_id
    pad = pad if pad is not None else stops[0]
    order = sorted(range(len(prompts)), key=lambda i: (len(prompts[i]), i))
    results: dict[int, list[int]] = {}
    for start in range(0, len(order), batch_size):
        members = order[start:start + batch_size]
        batch = [prompts[i] for i in members]
        width = max(len(p) for p in batch)
        ids = torch.tensor([[pad] * (width - len(p)) + p for p in batch], device=target.device)
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in batch], device=target.device)
        out = target.model.generate(input_ids=ids, attention_mask=mask, do_sample=False, max_new_tokens=max_new_tokens,
                                    eos_token_id=stops, pad_token_id=pad, temperature=None, top_p=None, top_k=None)
        for index, row in zip(members, out[:, width:].tolist()):
            results[index] = cut_at_stop(row, stops)
    return [results[i] for i in range(len(prompts))]


def continuations_for(target, prompts: list[Prompt], ids, options, thinking, responses,
                      reporter, *, template: str = "chat") -> tuple[dict[str, list[int]], int]:
    """Stage 1, continuations: the given `--responses` (cut to max_new_tokens), or the target's greedy
    continuations, from the on-disk cache or generated (and cached); and how many were generated."""
    if responses is not None:
        missing = [p.id for p in prompts if p.id not in responses]
        if missing:
            raise InputError(options.responses, f"no response for prompt {missing[0]!r}")
        return {p.id: responses[p.id][: options.max_new_tokens] for p in prompts}, 0
    cache = ContinuationCache(options.cache_dir)
    # template "raw" (doctor's raw-prompt variant: the text without the chat template) is cached apart
    keys = {p.id: cache.key(target, p.text if template == "chat" else f"\x1e{template}\x1e{p.text}", thinking,
                            options.max_new_tokens) for p in prompts}
    found = {p.id: cache.get(keys[p.id]) for p in prompts}
    todo = [p for p in prompts if found[p.id] is None]
    batch = options.generation_batch or generation_batch_size(target, [len(ids[p.id]) for p in todo],
                                                              options.max_new_tokens)
    reporter.phase("generate", len(todo))
    todo.sort(key=lambda p: len(ids[p.id]))  # similar lengths share a batch: the least padding
    for start in range(0, len(todo), batch):
        chunk = todo[start:start + batch]
        for prompt, cont in zip(chunk, generate_greedy(target, [ids[p.id] for p in chunk], options.max_new_tokens, batch)):
            cache.put(keys[prompt.id], cont)
            found[prompt.id] = cont
            reporter.advance("generate", prompt.id)
    return found, len(todo)  # type: ignore[return-value]


@torch.inference_mode()
def generate_sampled(target: Target, prompt: list[int], max_new_tokens: int, sampling, generator) -> list[int]:
    """One sampled continuation: the target alone, token by token with its cache, each token drawn from
    `sampling_probs` of its logits (z-lab's processing) with `generator`; cut after the first stop token.
    This is the text the speculative loop commits in distribution (the rejection rule keeps it exact)."""
    from ..model.sampling import draw, sampling_probs
    from ..model.target import _cache_keyword

    stops = set(stop_token_ids(target))
    ids = torch.tensor([prompt], device=target.device)
    out = target.model(input_ids=ids, use_cache=True)
    continuation: list[int] = []
    for _ in range(max_new_tokens):
        token = int(draw(sampling_probs(out.logits[0, -1:], sampling), generator)[0])
        continuation.append(token)
        if token in stops or len(continuation) == max_new_tokens:
            break
        out = target.model(input_ids=torch.tensor([[token]], device=target.device), use_cache=True,
                           **{_cache_keyword(target.model): out.past_key_values})
    return continuation


def sampled_continuations_for(target, prompts: list[Prompt], ids, options, thinking,
                              reporter) -> tuple[dict[tuple[str, int], list[int]], int]:
    """K sampled continuations per prompt ((prompt id, k) -> ids), cached like the greedy ones under a key
    that adds the sampling settings, the seed and k; and how many were generated."""
    from ..model.sampling import generator_for, sampling_of

    sampling = sampling_of(options)
    cache = ContinuationCache(options.cache_dir)
    found: dict[tuple[str, int], list[int]] = {}
    todo = []
    for prompt in prompts:
        for k in range(options.samples):
            key = sha256_text("\x1f".join([cache.key(target, prompt.text, thinking, options.max_new_tokens),
                                           json.dumps(sampling.to_dict(), sort_keys=True), str(options.seed), str(k)]))
            hit = cache.get(key)
            if hit is None:
                todo.append((prompt, k, key))
            else:
                found[(prompt.id, k)] = hit
    reporter.phase("sample", len(todo))
    for prompt, k, key in todo:
        cont = generate_sampled(target, ids[prompt.id], options.max_new_tokens, sampling,
                                generator_for(options.seed, prompt.id, k, target.device))
        cache.put(key, cont)
        found[(prompt.id, k)] = cont
        reporter.advance("sample", prompt.id)
    return found, len(todo)
