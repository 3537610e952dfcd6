"""Stage `continuations` (run_folder -> continuations -> trajectories): the target's greedy continuation of every
prompt, cached on disk (or the ones given with `--responses`, validated in inputs.py).

Why a cache: at temperature 0 the committed text of speculative decoding *is* the target's greedy
continuation (primer section 5), so it is generated once per (target config, weights, tokenizer, chat
template by content, dtype, device type, kernels, prompt, its generation batch, thinking flag,
max_new_tokens: `generation_settings`) and reused by every later run and every drafter. Generation is
the most expensive step of a run on a large target.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import weakref
from collections.abc import Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, cast

import torch

from ..core.errors import InputError
from ..model.target import Target, stop_token_ids
from .prompts import Prompt, chat_text, prompt_ids  # noqa: F401  (re-exported for callers of this stage)

if TYPE_CHECKING:
    from transformers import GenerationMixin


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


_TOKENIZER_HASHES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def tokenizer_hash(tokenizer) -> str:
    """Hash of the vocabulary and merges (tokenizer.json as the backend serializes it), computed once per
    tokenizer object: serialising a 248K vocabulary takes 0.3-0.8 s, and every run document (the partial
    ones too) records it. Remembered with the tokenizer's length, so a token added since is hashed again."""
    try:
        size, known = _TOKENIZER_HASHES[tokenizer]
        if size == len(tokenizer):
            return known
    except (KeyError, TypeError):  # not seen yet, or an object that cannot be weakly referenced
        pass
    backend = getattr(tokenizer, "backend_tokenizer", None)
    text = backend.to_str() if backend is not None else json.dumps(tokenizer.get_vocab(), sort_keys=True)
    digest = sha256_text(text)
    try:
        _TOKENIZER_HASHES[tokenizer] = (len(tokenizer), digest)
    except TypeError:
        pass
    return digest


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
        from ..core.documents.results import atomic_write
        from ..core.errors import InputError

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


def linear_layer_fixed_bytes() -> int:
    """Bytes one Gated-DeltaNet layer's cache holds once, whatever the batch and length: from transformers
    5.25 a 0-dim int64 tensor `cumulative_length_linear` (the tokens its conv state has seen, created in
    `cache_utils.LinearAttentionCacheLayerMixin.__init__`), 8 bytes; on earlier 5.x nothing. Read off
    transformers' own class, so a version that adds or drops such a field stays exact."""
    try:
        from transformers.cache_utils import LinearAttentionLayer
    except ImportError:  # no linear-attention cache in this transformers
        return 0
    layer = LinearAttentionLayer()
    values = [v for value in vars(layer).values() for v in (value.values() if isinstance(value, dict) else [value])]
    return sum(v.nbytes for v in values if torch.is_tensor(v))


def cache_fixed_bytes(config) -> int:
    """Bytes a generation cache holds once (not per sequence): `linear_layer_fixed_bytes` per Gated-DeltaNet
    layer. A cache of G sequences at `length` tokens holds G x cache_bytes_per_sequence + this."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    types = list(getattr(text, "layer_types", None) or [])
    return sum(1 for t in types if t == "linear_attention") * linear_layer_fixed_bytes()


MAX_GENERATION_BATCH = 64
CPU_GENERATION_BATCH = 8


@dataclass(frozen=True)
class GenerationBudget:
    """The generation batch and the memory it predicts on an accelerator, from `generation_budget`: the one
    rule `run` (`run_generation_budget`) and `plan` (commands/plan.py) both call, so that they choose the
    same batch and predict the same bytes (tests/test_plan.py compares them on the 27B shape)."""

    batch: int
    device_bytes: int  # the accelerator's total memory
    resident_bytes: int  # the weights resident during generation: every parameter of the target
    sequence_bytes: int  # one sequence's cache at the longest prompt + max_new_tokens, and two fp32 rows of logits
    sequences: int  # sequences in the plan (a batch never holds more)
    longest: int  # tokens of the longest sequence: longest prompt + max_new_tokens
    fixed_bytes: int = 0  # what the cache holds once, whatever its batch (`cache_fixed_bytes`)

    @property
    def predicted_bytes(self) -> int:
        """The weights plus `batch` sequences' caches and logits and the cache's fixed bytes (plan adds the
        prefill's activations)."""
        return self.resident_bytes + self.batch * self.sequence_bytes + self.fixed_bytes

    def to_dict(self) -> dict[str, int]:
        return {**dataclasses.asdict(self), "predicted_bytes": self.predicted_bytes}

    def describe(self) -> str:
        gib = 2 ** 30
        return (f"batch {self.batch}: half of 90% of {self.device_bytes / gib:,.1f} GiB less {self.resident_bytes / gib:,.1f} "
                f"GiB of weights, over {self.sequence_bytes / 2 ** 20:,.0f} MiB per sequence ({self.longest} tokens of cache, "
                f"two rows of logits); predicted {self.predicted_bytes / gib:,.1f} GiB before activations")


def generation_budget(config, dtype: torch.dtype, prompt_lengths: Sequence[int], max_new_tokens: int,
                      device_bytes: int, resident_bytes: int, batch: int | None = None) -> GenerationBudget:
    """Prompts per generation batch on an accelerator of `device_bytes` holding `resident_bytes` of weights:
    half of 90% of the memory less the weights (the other half for activations and the allocator), divided
    by one sequence's cache at the longest prompt + max_new_tokens plus two fp32 rows of logits; 1..64 and
    never more than the sequences planned. `batch` given (--generation-batch): that batch, priced alike.
    Decided from the total memory, never the free memory of the moment, and from every parameter of the
    target wherever it is placed, so that every process of a run (a shard, a rank, a resume, `--device cuda`,
    `cuda:0` or `--device-map`) cuts the same batches."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    longest = max(prompt_lengths, default=0) + max_new_tokens
    per_sequence = cache_bytes_per_sequence(text, dtype, longest) + text.vocab_size * 4 * 2
    fixed = cache_fixed_bytes(text)
    if batch is None:
        room = max(0, int(device_bytes * 0.9) - resident_bytes - fixed) // 2
        batch = max(1, min(MAX_GENERATION_BATCH, room // max(1, per_sequence)))
    batch = int(max(1, min(batch, len(prompt_lengths) or 1)))
    return GenerationBudget(batch, int(device_bytes), int(resident_bytes), int(per_sequence), len(prompt_lengths),
                            longest, fixed)


def run_generation_budget(target: Target, prompt_lengths: Sequence[int], max_new_tokens: int,
                          batch: int | None = None) -> GenerationBudget | None:
    """`generation_budget` for a loaded target on CUDA (None elsewhere): its device's total memory (an
    indexed device, model/target.indexed_device) and every parameter of the target, wherever placed. The
    drafters join the accelerator only after generation (evaluate, track, doctor), so the target is all
    that is resident, and a run's batch does not depend on how many drafters it scores."""
    from ..model.target import device_memory_bytes, indexed_device, parameter_bytes

    device = indexed_device(target.device)
    if device.type != "cuda":
        return None
    return generation_budget(target.model.config, target.dtype, prompt_lengths, max_new_tokens,
                             device_memory_bytes(device), parameter_bytes(target.model), batch)


def generation_batch_size(target: Target, prompt_lengths: Sequence[int], max_new_tokens: int) -> int:
    """Prompts generated together when `--generation-batch` is not given: 8 on CPU (where batched output
    equals one-at-a-time output: tests/test_generation.py), on CUDA `run_generation_budget`'s batch."""
    budget = run_generation_budget(target, prompt_lengths, max_new_tokens)
    return CPU_GENERATION_BATCH if budget is None else budget.batch


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


def _generator(target: Target) -> GenerationMixin:
    """The target's model as the generator it is: load_target loads it with AutoModelForCausalLM, whose classes
    all mix in GenerationMixin (PreTrainedModel itself does not declare `generate`)."""
    return cast("GenerationMixin", target.model)


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
            out = _generator(target).generate(input_ids=ids, attention_mask=mask,
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


def template_ids(tokenizer, prompt: Prompt, thinking: bool, template: str = "chat") -> list[int]:
    """A prompt's ids through the chat template ("chat") or its raw text without it ("raw": doctor)."""
    if template == "chat":
        return prompt_ids(tokenizer, prompt, thinking)
    return tokenizer(prompt.text, add_special_tokens=False)["input_ids"]


def generation_settings(target: Target, settings, thinking: bool, template: str) -> str:
    """Everything a cached continuation depends on besides its prompt and its batch: the content digests of
    the run's provenance (`target_content`: config and generation config, every weight byte, tokenizer
    files, chat template), the dtype, the device type and the bound Gated-DeltaNet kernels (in bf16 each
    moves near-tie argmaxes), the thinking flag, the template and max_new_tokens."""
    from ..formats.files import target_content
    from ..model.kernels import kernel_report, kernel_summary

    content = target_content(target.path, None, target.tokenizer.chat_template, settings.output.cache)
    content.pop("responses_file", None)
    return json.dumps({**content, "dtype": str(target.dtype), "device_type": target.device.type,
                       "kernels": kernel_summary(kernel_report(target.model)), "thinking": bool(thinking),
                       "template": template, "max_new_tokens": int(settings.inputs.max_new_tokens)}, sort_keys=True)


def _pid(item) -> str:
    return item if isinstance(item, str) else item[0]


def _whole_plan(target, prompts, ids, settings, thinking, universe, items_of, template):
    """The generation plan of the run's prompt set (`universe` plus the prompts given): [(members, their
    prompt ids)], every prompt tokenized as the run tokenizes it; prompt id -> Prompt; and on an
    accelerator the budget of each turn's batch (`run_generation_budget`)."""
    everyone = {p.id: p for p in (universe or [])} | {p.id: p for p in prompts}
    known = dict(ids)
    for prompt in everyone.values():
        if prompt.id not in known:
            known[prompt.id] = template_ids(target.tokenizer, prompt, thinking, template)
    by_turn: dict[int, dict] = {}  # a multi-turn set's turns are planned apart, each over its own turn (turns.py)
    for p in everyone.values():
        by_turn.setdefault(p.turn(), {}).update({item: len(known[_pid(item)]) for item in items_of(p)})
    plan, budgets = [], []
    for turn in sorted(by_turn):
        lengths = by_turn[turn]
        given = settings.batching.generation_batch
        budget = run_generation_budget(target, list(lengths.values()), settings.inputs.max_new_tokens, given)
        budgets += [budget] if budget is not None else []
        batch = budget.batch if budget is not None else given or CPU_GENERATION_BATCH
        plan += [(members, [known[_pid(m)] for m in members]) for members in generation_plan(lengths, batch)]
    return plan, everyone, budgets


_SHARED_BY_RANKS: list[object] = []  # the process groups sharing generation (commands/distributed.py), innermost last


@contextmanager
def generation_shared_by_ranks(group=None):
    """Within the block, every call of `continuations_for` / `sampled_continuations_for` is collective over
    the torch.distributed `group` (default: every rank; torchrun's ranks in commands/distributed.py): each
    batch of the run's plan that any rank needs is generated once, by one rank (`share_batches`), and the
    continuations reach the ranks that evaluate them. So each of N ranks generates about 1/N of the
    continuations (its evaluation shard stays balanced by length), where each rank used to generate every
    batch its shard touches: with neighbouring lengths on different ranks, all of them. Every rank must
    make the same calls in the same order (they do: the same settings, the same stages)."""
    _SHARED_BY_RANKS.append(group)
    try:
        yield
    finally:
        _SHARED_BY_RANKS.pop()


def share_batches(batches: int, ranks: int) -> list[int]:
    """The rank that generates each of `batches` batches (in plan order): batch i to rank i mod N. Every
    batch decodes up to the same --max-new-tokens steps, and a decode step costs about the same at any batch
    size (it reads the weights once), so equal numbers of batches are equal work."""
    return [index % ranks for index in range(batches)]


def _exchange(group, value) -> list:
    import torch.distributed as dist

    gathered = [None] * dist.get_world_size(group)
    dist.all_gather_object(gathered, value, group=group)
    return gathered


def _planned(target, prompts, ids, settings, thinking, universe, reporter, *, phase, items_of, item_key, template,  # noqa: C901 (past the ceiling before it was set; split by idea when next touched)
             generate):
    """Cached or generated in planned batches: item -> continuation, and how many were generated (here, for
    any rank). A key holds `generation_settings`, the item (its text, and for samples the sampling and k)
    and its whole batch (every member's text), so a cached continuation is only ever one made in the same
    batch: in bf16 the batch's padded shapes move near-tie argmaxes. Companions of a missing item are
    generated with it (and cached), and the number of them is said. Inside `generation_shared_by_ranks`
    the batches any rank is missing are split among the ranks and the continuations exchanged."""
    cache = ContinuationCache(settings.output.cache)
    plan, everyone, budgets = _whole_plan(target, prompts, ids, settings, thinking, universe, items_of, template)
    made_with = generation_settings(target, settings, thinking, template) if cache.directory is not None else ""
    wanted = {item for p in prompts for item in items_of(p)}

    def keys_of(members):
        batch = sha256_text("\x1e".join(f"{everyone[_pid(m)].text}\x1d{item_key(m)}" for m in members))
        return {m: ContinuationCache.key(made_with, everyone[_pid(m)].text, item_key(m), batch) for m in members}

    found, asked, keys = {}, {}, {}  # asked: plan index -> the items missing there (on any rank when shared)
    for index, (members, _) in enumerate(plan):
        if wanted.isdisjoint(members):
            continue
        keys[index] = keys_of(members)
        for m in wanted.intersection(members):
            hit = cache.get(keys[index][m])
            if hit is None:
                asked.setdefault(index, set()).add(m)
            else:
                found[m] = hit
    group = _SHARED_BY_RANKS[-1] if _SHARED_BY_RANKS else None
    shared = bool(_SHARED_BY_RANKS)
    mine = sorted(asked)
    if shared:  # collective: every rank's missing items, the same plan on every rank, each batch to one rank
        import torch.distributed as dist

        digest = sha256_text(json.dumps([[str(m) for m in members] for members, _ in plan]))
        everyone_asked = _exchange(group, (digest, {i: sorted(m) for i, m in asked.items()}))
        if any(theirs != digest for theirs, _ in everyone_asked):
            sizes = sorted({b.batch for b in budgets}) or [settings.batching.generation_batch or CPU_GENERATION_BATCH]
            raise InputError(None, f"torchrun ranks planned different generation batches (this rank: {sizes}); "
                                   "GPUs of different memory choose different batches: give --generation-batch N")
        asked = {}
        for _, theirs in everyone_asked:
            for index, items in theirs.items():
                asked.setdefault(index, set()).update(tuple(m) if isinstance(m, list) else m for m in items)
        indices = sorted(asked)
        owners = share_batches(len(indices), dist.get_world_size(group))
        rank = dist.get_rank(group)
        mine = [i for i, owner in zip(indices, owners) if owner == rank]
    todo = sum(len(asked[i]) for i in mine)
    companions = sum(len(plan[i][0]) for i in mine) - todo
    if shared and asked:
        reporter.note(f"{phase}: this rank generates {todo} of the {sum(map(len, asked.values()))} continuations the "
                      f"ranks are missing ({len(mine)} of {len(asked)} planned batches); the others come from the other ranks")
    if companions:  # a shard, rank or resume: the run's other prompts in the same batches
        reporter.note(f"{phase}: {companions} companion(s) of the {todo} asked for generated too, in the batches "
                      "planned over the run's prompts, so that no continuation depends on --shard or a resume")
    if todo and budgets:
        reporter.note(f"{phase}: " + "; ".join(b.describe() for b in budgets))
    if todo and settings.inputs.limit and target.dtype != torch.float32:
        reporter.note(f"{phase}: batches planned over the {len(everyone)} prompts of this --limit; in {str(target.dtype)[6:]} a greedy text can depend on the prompts batched with it, so the full run's may differ (run --numerics-check N measures how far)")
    reporter.phase(phase, todo)
    made = {}
    for index in mine:
        members, member_ids = plan[index]
        keys.setdefault(index, keys_of(members))
        for m, cont in zip(members, generate(members, member_ids)):
            if m in asked[index] or cache.get(keys[index][m]) is None:
                cache.put(keys[index][m], cont)
            if m in asked[index]:
                made[m] = cont
                reporter.advance(phase, _pid(m))
    if shared:  # every rank's continuations to every rank; each keeps (and caches) what it asked for
        for theirs in _exchange(group, made):
            for m, cont in theirs.items():
                m = tuple(m) if isinstance(m, list) else m
                if m in wanted and m not in found:
                    found[m] = cont
                    index = next(i for i in keys if m in keys[i])
                    if cache.get(keys[index][m]) is None:
                        cache.put(keys[index][m], cont)
    else:
        found.update(made)
    return found, todo


def continuations_for(target, prompts: list[Prompt], ids, settings, thinking, responses,
                      reporter, *, template: str = "chat", universe: list[Prompt] | None = None
                      ) -> tuple[dict[str, list[int]], int]:
    """The continuations stage: the given `--responses` (cut to max_new_tokens), or the target's greedy
    continuations, from the on-disk cache or generated (and cached); and how many were generated.

    Generation follows `generation_plan` over `universe` (the run's prompts, before --shard, torchrun's
    split, --limit or a resume; default the prompts given): a missing prompt is generated in its planned
    batch, with its companions, which are cached too. `template` "raw": doctor's variant without the chat
    template (`template_ids`), cached apart."""
    if responses is not None:
        missing = [p.id for p in prompts if p.id not in responses]
        if missing:
            raise InputError(settings.inputs.responses, f"no response for prompt {missing[0]!r}")
        return {p.id: responses[p.id][: settings.inputs.max_new_tokens] for p in prompts}, 0
    return _planned(target, prompts, ids, settings, thinking, universe, reporter, phase="generate",
                    items_of=lambda p: [p.id], item_key=lambda item: "", template=template,
                    generate=lambda members, member_ids: generate_greedy(target, member_ids, settings.inputs.max_new_tokens,
                                                                         len(members)))


@torch.inference_mode()
def generate_sampled(target: Target, prompt: list[int], max_new_tokens: int, sampling, generator) -> list[int]:
    """One sampled continuation, one prompt alone (the oracle `generate_sampled_batch` is tested against):
    the target token by token with its cache, each token drawn from `sampling_probs` of its logits (z-lab's
    processing) with `generator`; cut after the first stop token."""
    from ..model.hf_forward import cache_keyword, output_cache
    from ..model.sampling import draw, sampling_probs

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
        out = _generator(target).generate(input_ids=ids, attention_mask=mask,
                                    generation_config=greedy_config(max_new_tokens, stops, pad),
                                    logits_processor=LogitsProcessorList([_draw_per_row(sampling, generators)]))
    return [cut_at_stop(row, stops) for row in out[:, ids.shape[1]:].tolist()]


def sampled_continuations_for(target, prompts: list[Prompt], ids, settings, thinking, reporter, *,
                              universe: list[Prompt] | None = None) -> tuple[dict[tuple[str, int], list[int]], int]:
    """K sampled continuations per prompt ((prompt id, k) -> ids), cached like the greedy ones under a key
    that adds the sampling settings, the seed and k; and how many were generated. Batched like the greedy
    ones (`generation_plan` over (prompt, k) of the run's prompts), each (prompt, k) with its generator."""
    from ..model.sampling import generator_for

    sampling, seed = settings.sampling, settings.seed
    drawn = json.dumps(sampling.to_dict(), sort_keys=True) + f"|seed {seed}"

    def generate(members, member_ids):
        generators = [generator_for(seed, pid, k, target.device) for pid, k in members]
        return generate_sampled_batch(target, member_ids, settings.inputs.max_new_tokens, sampling, generators)

    return _planned(target, prompts, ids, settings, thinking, universe, reporter, phase="sample",
                    items_of=lambda p: [(p.id, k) for k in range(sampling.samples)],
                    item_key=lambda item: f"{drawn}|k {item[1]}", template="chat", generate=generate)
