"""Stage 1, continuations: the target's greedy continuation of every prompt, cached on disk (or the ones
given with `--responses`, validated in inputs.py).

Why a cache: at temperature 0 the committed text of speculative decoding *is* the target's greedy
continuation (primer section 5), so it is generated once per (target config, weights, tokenizer, chat
template by content, dtype, device type, kernels, prompt, its generation batch, thinking flag,
max_new_tokens: `generation_settings`) and reused by every later run and every drafter. Generation is
the most expensive step of a run on a large target.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from contextlib import contextmanager
from pathlib import Path

import torch

from ..core.errors import InputError
from ..core.options import default_cache_dir  # noqa: F401  (re-exported: where continuations are cached)
from ..model.target import Target, stop_token_ids
from .prompts import Prompt, chat_text, prompt_ids  # noqa: F401  (re-exported for callers of this stage)


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
    def key(*parts: str) -> str:
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
        from ..core.errors import InputError
        from ..core.results import atomic_write

        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise InputError(self.directory, f"cannot create the continuation cache (--cache-dir): "
                                             f"{exc.strerror or exc}") from None
        # a full disk is one line naming the entry (atomic_write), not a bare "No space left on device"
        atomic_write(self.directory / f"{key}.json", json.dumps({"continuation": continuation}))


def cache_bytes_per_sequence(config, dtype: torch.dtype, length: int) -> int:
    """Bytes of one sequence's generation cache at `length` tokens, as transformers lays it out: keys and
    values of every attention layer (model dtype), and per Gated-DeltaNet layer its conv state
    ([conv dim, kernel], model dtype) and recurrent state ([value heads, key dim, value dim], float32, as
    fla and the torch fallback both keep it). Checked against the real cache's bytes (tests)."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    layers = text.num_hidden_layers
    types = list(getattr(text, "layer_types", None) or ["full_attention"] * layers)
    linear = sum(1 for t in types if t == "linear_attention")
    element = torch.finfo(dtype).bits // 8
    heads = getattr(text, "num_key_value_heads", None) or text.num_attention_heads
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
    kv = 2 * (layers - linear) * heads * head_dim * length * element
    if not linear:
        return kv
    key_dim, value_dim = text.linear_key_head_dim, text.linear_value_head_dim
    key_heads, value_heads = text.linear_num_key_heads, text.linear_num_value_heads
    conv = (2 * key_heads * key_dim + value_heads * value_dim) * text.linear_conv_kernel_dim * element
    recurrent = value_heads * key_dim * value_dim * 4
    return kv + linear * (conv + recurrent)


MAX_GENERATION_BATCH = 64
CPU_GENERATION_BATCH = 8


def generation_batch_for(config, dtype: torch.dtype, prompt_lengths: Sequence[int], max_new_tokens: int,
                         device_bytes: int, weight_bytes: int) -> int:
    """Prompts per generation batch on an accelerator of `device_bytes` holding `weight_bytes` of weights:
    half of what is left after the weights (the rest for activations and the allocator), divided by one
    sequence's cache at the longest prompt + max_new_tokens plus two fp32 rows of logits; 1..64. Decided
    from the total memory, never the free memory of the moment, so that every process of a run (a shard,
    a rank, a resume) cuts the same batches."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    length = max(prompt_lengths, default=0) + max_new_tokens
    per_sequence = cache_bytes_per_sequence(text, dtype, length) + text.vocab_size * 4 * 2
    room = max(0, int(device_bytes * 0.9) - weight_bytes) // 2
    return int(max(1, min(MAX_GENERATION_BATCH, room // max(1, per_sequence))))


def generation_batch_size(target: Target, prompt_lengths: Sequence[int], max_new_tokens: int) -> int:
    """Prompts generated together when `--generation-batch` is not given: 8 on CPU (where batched output
    equals one-at-a-time output: tests/test_generation.py), on CUDA `generation_batch_for` the device's
    total memory and the weights on it."""
    if target.device.type != "cuda":
        return CPU_GENERATION_BATCH
    weights = sum(t.nbytes for t in [*target.model.parameters(), *target.model.buffers()] if t.device == target.device)
    total = torch.cuda.get_device_properties(target.device).total_memory
    return generation_batch_for(target.model.config, target.dtype, prompt_lengths, max_new_tokens, total, weights)


def greedy_config(max_new_tokens: int, stops: Sequence[int], pad: int):
    """A fresh greedy configuration: argmax every step, whatever the checkpoint's generation_config.json
    says (sampling, temperature, repetition_penalty, no_repeat_ngram_size, min_new_tokens, bad words...)."""
    from transformers import GenerationConfig

    return GenerationConfig(do_sample=False, max_new_tokens=max_new_tokens, eos_token_id=list(stops), pad_token_id=pad)


@contextmanager
def only_this_config(model):
    """transformers fills every field a passed configuration leaves unset from `model.generation_config`
    (a checkpoint's repetition_penalty 1.3 would survive a fresh greedy configuration); during the call the
    model's own configuration is the library default, so nothing is inherited."""
    from transformers import GenerationConfig

    saved = model.generation_config
    model.generation_config = GenerationConfig()
    try:
        yield
    finally:
        model.generation_config = saved


def _left_padded(target: Target, batch: list[list[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(p) for p in batch)
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in batch], device=target.device)
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in batch], device=target.device)
    return ids, mask


def _pad_id(target: Target, stops: Sequence[int]) -> int:
    pad = target.tokenizer.pad_token_id
    return pad if pad is not None else stops[0]


@torch.inference_mode()
def generate_greedy(target: Target, prompts: list[list[int]], max_new_tokens: int, batch_size: int = 1) -> list[list[int]]:
    """The target's greedy continuations (cut after the first stop token), `batch_size` prompts at a time,
    in the order given.

    Prompts are grouped by length (least padding) and left-padded with an attention mask: attention
    layers mask the pads, Gated-DeltaNet layers zero them before the recurrence (HF's
    `apply_mask_to_padding_states`), and positions count from each prompt's first real token, so a prompt
    generates the same tokens in a batch as alone (tested on fp32 CPU, dense and hybrid targets; the run's
    self-consistency figure checks every continuation against one full forward anyway). Greedy is greedy:
    `greedy_config` under `only_this_config`, stop ids from the tokenizer and the checkpoint's config."""
    stops = stop_token_ids(target)
    pad = _pad_id(target, stops)
    order = sorted(range(len(prompts)), key=lambda i: (len(prompts[i]), i))
    results: dict[int, list[int]] = {}
    for start in range(0, len(order), batch_size):
        members = order[start:start + batch_size]
        ids, mask = _left_padded(target, [prompts[i] for i in members], pad)
        with only_this_config(target.model):
            out = target.model.generate(input_ids=ids, attention_mask=mask,
                                        generation_config=greedy_config(max_new_tokens, stops, pad))
        for index, row in zip(members, out[:, ids.shape[1]:].tolist()):
            results[index] = cut_at_stop(row, stops)
    return [results[i] for i in range(len(prompts))]


def generation_plan(lengths: dict[str, int], batch: int) -> list[list[str]]:
    """The generation batches of a run's prompt set: prompts sorted by length (ties by id), cut every
    `batch`. A prompt is always generated with the same companions (the same padded shapes, so in bf16 the
    same near-tie argmaxes), whichever shard, rank or resume of that run asks for it."""
    order = sorted(lengths, key=lambda pid: (lengths[pid], pid))
    return [order[i:i + batch] for i in range(0, len(order), batch)]


def whole_prompt_set(options) -> list[Prompt] | None:
    """The run's prompts after --limit/--seed, before --shard, torchrun's split or a resume: what generation
    plans over, so `--limit N` generates N (as `plan` counts) and every shard, rank or resume gets the same
    companions. In bf16 a --limit run's text may then differ from the full run's (said; --numerics-check
    measures it). A multi-turn set keeps its whole set's plan (turns.py answers every earlier turn in it)."""
    from .hf_prompts import answered_set
    from .long_prompts import is_long_source, packed_set
    from .prompts import load_prompts, select

    limit, seed = options.limit, options.prompt_seed
    if is_long_source(options.prompts):
        return None if (packed := packed_set(options.prompts)) is None else select(packed, limit, seed)
    field = options.prompt_field
    return answered_set(options.prompts) or load_prompts(options.prompts, limit, seed, prompt_field=field)


def template_ids(tokenizer, prompt: Prompt, thinking: bool, template: str = "chat") -> list[int]:
    """A prompt's ids through the chat template ("chat") or its raw text without it ("raw": doctor)."""
    if template == "chat":
        return prompt_ids(tokenizer, prompt, thinking)
    return tokenizer(prompt.text, add_special_tokens=False)["input_ids"]


def generation_settings(target: Target, options, thinking: bool, template: str) -> str:
    """Everything a cached continuation depends on besides its prompt and its batch: the content digests of
    the run's provenance (`target_content`: config and generation config, every weight byte, tokenizer
    files, chat template), the dtype, the device type and the bound Gated-DeltaNet kernels (in bf16 each
    moves near-tie argmaxes), the thinking flag, the template and max_new_tokens."""
    from ..formats.files import target_content
    from ..model.kernels import kernel_report, kernel_summary

    content = target_content(target.path, None, target.tokenizer.chat_template, options.cache_dir)
    content.pop("responses_file", None)
    return json.dumps({**content, "dtype": str(target.dtype), "device_type": target.device.type,
                       "kernels": kernel_summary(kernel_report(target.model)), "thinking": bool(thinking),
                       "template": template, "max_new_tokens": int(options.max_new_tokens)}, sort_keys=True)


def _pid(item) -> str:
    return item if isinstance(item, str) else item[0]


def _whole_plan(target, prompts, ids, options, thinking, universe, items_of, template):
    """The generation plan of the run's prompt set (`universe` plus the prompts given): [(members, their
    prompt ids)], every prompt tokenized as the run tokenizes it; and prompt id -> Prompt."""
    everyone = {p.id: p for p in (universe or [])} | {p.id: p for p in prompts}
    known = dict(ids)
    for prompt in everyone.values():
        if prompt.id not in known:
            known[prompt.id] = template_ids(target.tokenizer, prompt, thinking, template)
    by_turn: dict[int, dict] = {}  # a multi-turn set's turns are planned apart, each over its own turn (turns.py)
    for p in everyone.values():
        by_turn.setdefault(p.turn(), {}).update({item: len(known[_pid(item)]) for item in items_of(p)})
    plan = []
    for turn in sorted(by_turn):
        lengths = by_turn[turn]
        batch = options.batching.generation_batch or generation_batch_size(target, list(lengths.values()), options.max_new_tokens)
        plan += [(members, [known[_pid(m)] for m in members]) for members in generation_plan(lengths, batch)]
    return plan, everyone


def _planned(target, prompts, ids, options, thinking, universe, reporter, *, phase, items_of, item_key, template,
             generate):
    """Cached or generated in planned batches: item -> continuation, and how many were generated. A key
    holds `generation_settings`, the item (its text, and for samples the sampling and k) and its whole
    batch (every member's text), so a cached continuation is only ever one made in the same batch: in bf16
    the batch's padded shapes move near-tie argmaxes. Companions of a missing item are generated with it
    (and cached), and the number of them is said."""
    cache = ContinuationCache(options.cache_dir)
    plan, everyone = _whole_plan(target, prompts, ids, options, thinking, universe, items_of, template)
    settings = generation_settings(target, options, thinking, template) if cache.directory is not None else ""
    wanted = {item for p in prompts for item in items_of(p)}
    found, todo, work = {}, set(), []
    for members, member_ids in plan:
        if wanted.isdisjoint(members):
            continue
        batch = sha256_text("\x1e".join(f"{everyone[_pid(m)].text}\x1d{item_key(m)}" for m in members))
        keys = {m: ContinuationCache.key(settings, everyone[_pid(m)].text, item_key(m), batch) for m in members}
        missing = set()
        for m in wanted.intersection(members):
            hit = cache.get(keys[m])
            if hit is None:
                missing.add(m)
            else:
                found[m] = hit
        if missing:
            work.append((members, member_ids, keys, missing))
            todo |= missing
    companions = sum(len(members) for members, *_ in work) - len(todo)
    if companions:  # a shard, rank or resume: the run's other prompts in the same batches
        reporter.note(f"{phase}: {companions} companion(s) of the {len(todo)} asked for generated too, in the batches "
                      "planned over the run's prompts, so that no continuation depends on --shard or a resume")
    if todo and options.limit and target.dtype != torch.float32:
        reporter.note(f"{phase}: batches planned over the {len(everyone)} prompts of this --limit; in {str(target.dtype)[6:]} a greedy text can depend on the prompts batched with it, so the full run's may differ (run --numerics-check N measures how far)")
    reporter.phase(phase, len(todo))
    for members, member_ids, keys, missing in work:
        for m, cont in zip(members, generate(members, member_ids)):
            if m in missing or cache.get(keys[m]) is None:
                cache.put(keys[m], cont)
            if m in missing:
                found[m] = cont
                reporter.advance(phase, _pid(m))
    return found, len(todo)


def continuations_for(target, prompts: list[Prompt], ids, options, thinking, responses,
                      reporter, *, template: str = "chat", universe: list[Prompt] | None = None
                      ) -> tuple[dict[str, list[int]], int]:
    """Stage 1, continuations: the given `--responses` (cut to max_new_tokens), or the target's greedy
    continuations, from the on-disk cache or generated (and cached); and how many were generated.

    Generation follows `generation_plan` over `universe` (the run's prompts, before --shard, torchrun's
    split, --limit or a resume; default the prompts given): a missing prompt is generated in its planned
    batch, with its companions, which are cached too. `template` "raw": doctor's variant without the chat
    template (`template_ids`), cached apart."""
    if responses is not None:
        missing = [p.id for p in prompts if p.id not in responses]
        if missing:
            raise InputError(options.responses, f"no response for prompt {missing[0]!r}")
        return {p.id: responses[p.id][: options.max_new_tokens] for p in prompts}, 0
    return _planned(target, prompts, ids, options, thinking, universe, reporter, phase="generate",
                    items_of=lambda p: [p.id], item_key=lambda item: "", template=template,
                    generate=lambda members, member_ids: generate_greedy(target, member_ids, options.max_new_tokens,
                                                                         len(members)))


@torch.inference_mode()
def generate_sampled(target: Target, prompt: list[int], max_new_tokens: int, sampling, generator) -> list[int]:
    """One sampled continuation, one prompt alone (the oracle `generate_sampled_batch` is tested against):
    the target token by token with its cache, each token drawn from `sampling_probs` of its logits (z-lab's
    processing) with `generator`; cut after the first stop token."""
    from ..model.sampling import draw, sampling_probs
    from ..model.target import cache_keyword, output_cache

    stops = set(stop_token_ids(target))
    ids = torch.tensor([prompt], device=target.device)
    out = target.model(input_ids=ids, use_cache=True)
    continuation: list[int] = []
    for _ in range(max_new_tokens):
        probs = sampling_probs(out.logits[0, -1:], sampling)
        token = int(draw(probs.to(generator.device), generator)[0])
        continuation.append(token)
        if token in stops or len(continuation) == max_new_tokens:
            break
        out = target.model(input_ids=torch.tensor([[token]], device=target.device), use_cache=True,
                           **{cache_keyword(target.model): output_cache(out)})
    return continuation


def _draw_per_row(sampling, generators):
    """A logits processor that draws each row's next token with that row's own generator (z-lab's
    processing, `draw`) and leaves only it finite, so that greedy generation commits exactly the draw."""
    from transformers import LogitsProcessor

    from ..model.sampling import draw, sampling_probs

    class DrawPerRow(LogitsProcessor):
        def __call__(self, input_ids, scores):
            chosen = [draw(sampling_probs(scores[i:i + 1], sampling).to(g.device), g)[0] for i, g in enumerate(generators)]
            out = torch.full_like(scores, float("-inf"))
            out[torch.arange(len(chosen), device=scores.device), torch.stack(chosen).to(scores.device)] = 0.0
            return out

    return DrawPerRow()


@torch.inference_mode()
def generate_sampled_batch(target: Target, prompts: list[list[int]], max_new_tokens: int, sampling,
                           generators: list[torch.Generator]) -> list[list[int]]:
    """Sampled continuations of several prompts in one left-padded batch, row i drawn with generators[i]:
    each row gets the tokens `generate_sampled` gives it alone (tested in fp32)."""
    from transformers import LogitsProcessorList

    stops = stop_token_ids(target)
    pad = _pad_id(target, stops)
    ids, mask = _left_padded(target, prompts, pad)
    with only_this_config(target.model):
        out = target.model.generate(input_ids=ids, attention_mask=mask,
                                    generation_config=greedy_config(max_new_tokens, stops, pad),
                                    logits_processor=LogitsProcessorList([_draw_per_row(sampling, generators)]))
    return [cut_at_stop(row, stops) for row in out[:, ids.shape[1]:].tolist()]


def sampled_continuations_for(target, prompts: list[Prompt], ids, options, thinking, reporter, *,
                              universe: list[Prompt] | None = None) -> tuple[dict[tuple[str, int], list[int]], int]:
    """K sampled continuations per prompt ((prompt id, k) -> ids), cached like the greedy ones under a key
    that adds the sampling settings, the seed and k; and how many were generated. Batched like the greedy
    ones (`generation_plan` over (prompt, k) of the run's prompts), each (prompt, k) with its generator."""
    from ..model.sampling import generator_for, sampling_of

    sampling = sampling_of(options)
    settings = json.dumps(sampling.to_dict(), sort_keys=True) + f"|seed {options.seed}"

    def generate(members, member_ids):
        generators = [generator_for(options.seed, pid, k, target.device) for pid, k in members]
        return generate_sampled_batch(target, member_ids, options.max_new_tokens, sampling, generators)

    return _planned(target, prompts, ids, options, thinking, universe, reporter, phase="sample",
                    items_of=lambda p: [(p.id, k) for k in range(options.samples)],
                    item_key=lambda item: f"{settings}|k {item[1]}", template="chat", generate=generate)
