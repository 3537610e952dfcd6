"""The target model: loading, tap capture with forward hooks, and which kernels its layers bound.

Why hooks and not `output_hidden_states`: HF's tuple holds L+1 full-sequence states (about 2.7 GB for a
64-layer model at 4K tokens), and its last entry is *post* final norm, not the raw output of the last
layer that DFlash taps. A hook on decoder layer t returns exactly "the output of layer t" (z-lab id t,
speculators id t+1), for the chosen layers only.

Why the kernel report: transformers binds the Gated-DeltaNet functions at import time; up to 5.2x it calls
fla whatever the device, so with flash-linear-attention (triton) importable a CPU run of a hybrid target
crashes deep inside a kernel; and CPU (torch fallback) and GPU (fla) states differ numerically. So we say, per
layer, which function runs (model/kernels.py probes it), and refuse the CPU+fla combination up front.

Why `use_kernels=False`: from 5.25, with the `kernels` package installed, `from_pretrained` kernelizes by
default, replacing RMSNorm, activations, RoPE and the Gated-DeltaNet layers on CUDA with code downloaded from
the Hugging Face Hub (some with trust_remote_code), and refusing the meta device outright. The target we
evaluate is transformers' own modeling code with fla, as on the GPU image (5.17, where the default is off).
"""

from __future__ import annotations

import hashlib
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch import nn

from ..core.errors import InputError, read_json_object
from ..formats.files import resolve_local_or_cached
from ..formats.validation import TargetInfo
from .hf_forward import cache_keyword, output_cache
from .kernels import decoder_layers, kernel_report, quiet_cpu_fallback_advice
from .lm_head import greedy_ids

if TYPE_CHECKING:  # the types only: load_target's AutoModelForCausalLM / AutoTokenizer give these
    from transformers import PreTrainedModel, PreTrainedTokenizerBase


@dataclass
class Target:
    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    name: str  # as the user gave it
    path: Path  # resolved local folder
    device: torch.device
    dtype: torch.dtype
    info: TargetInfo
    layers: nn.ModuleList  # the decoder layers, in order
    tap_passes: int = 0  # forward passes that captured taps (tests count these)
    _fingerprint: str | None = field(default=None, repr=False)

    @property
    def embed_tokens(self) -> nn.Module:
        return self.model.get_input_embeddings()

    @property
    def lm_head(self) -> nn.Module:
        return self.model.get_output_embeddings()

    @property
    def layer_types(self) -> list[str]:
        text = text_config(self.model.config)
        return list(getattr(text, "layer_types", None) or ["full_attention"] * self.info.num_layers)

    def fingerprint(self) -> str:
        """sha256 of config.json, each shard's header and size, and weight bytes sampled across each shard.

        Hashing every byte of a 54 GB target would take minutes; the header alone would not tell two
        checkpoints of one architecture apart. 64 windows of 64 KiB spread over each shard do (and small
        shards, like the test bed's, are hashed whole)."""
        if self._fingerprint is None:
            from ..core.errors import open_regular, read_bytes

            digest = hashlib.sha256(read_bytes(self.path / "config.json"))
            for file in sorted(self.path.glob("*.safetensors")):
                size = file.stat().st_size
                digest.update(f"{file.name}:{size}".encode())
                with open_regular(file) as handle:
                    if size <= 64 * 65536:
                        digest.update(handle.read())
                        continue
                    for k in range(64):
                        handle.seek(k * (size - 65536) // 63)
                        digest.update(handle.read(65536))
            self._fingerprint = digest.hexdigest()
        return self._fingerprint


def text_config(config):
    """The language-model part of a config (VLM wrappers such as qwen3_5 nest it in text_config)."""
    return getattr(config, "text_config", None) or config


def target_info(name_or_path: str | Path) -> TargetInfo:
    """Sizes from the target's config.json alone, for validating drafters without loading weights."""
    path = resolve_local_or_cached(str(name_or_path))
    config_file = path / "config.json"
    raw = read_json_object(config_file, missing="not a model folder: no config.json")
    text = raw.get("text_config") or raw
    try:
        return TargetInfo(name=str(name_or_path), num_layers=int(text["num_hidden_layers"]),
                          hidden_size=int(text["hidden_size"]), vocab_size=int(text["vocab_size"]))
    except KeyError as exc:
        raise InputError(config_file, f"missing config key {exc.args[0]!r}") from None


TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json")


def load_tokenizer(path: Path):
    """The target's tokenizer with its chat template, or one line naming the target folder."""
    from transformers import AutoTokenizer

    from ..core.errors import regular_files
    from ..formats.files import TOKENIZER_FILES as ALL_TOKENIZER_FILES

    path = Path(path)
    regular_files([path / name for name in ALL_TOKENIZER_FILES])  # transformers opens them: no FIFO
    if not any((path / name).is_file() for name in TOKENIZER_FILES):
        raise InputError(path, f"target has no tokenizer files (none of {', '.join(TOKENIZER_FILES)})")
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    except Exception as exc:  # tokenizers raise many types; all mean "this folder is broken"
        raise InputError(path, f"cannot load the target tokenizer: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None
    if not tokenizer.chat_template:
        raise InputError(path, "the target tokenizer has no chat template (chat_template.jinja or "
                               "tokenizer_config.json chat_template); prompts are sent through it")
    tokenizer.template_file = template_file(path)  # what a template error names (pipeline/prompts.chat_text)
    for thinking in (False, True):  # rendered once, both ways doctor may send it, before anything is written
        render_chat(tokenizer, [{"role": "user", "content": "Say hello."}], thinking)
    return tokenizer


def template_file(path: Path) -> Path:
    """The file the target's chat template is read from (transformers prefers chat_template.jinja)."""
    path = Path(path)
    for name in ("chat_template.jinja", "chat_template.json", "tokenizer_config.json"):
        if (path / name).is_file():
            return path / name
    return path


def render_chat(tokenizer, messages: list[dict], enable_thinking: bool) -> str:
    """The conversation through the target's chat template (generation prompt added), or one InputError
    naming the template's file: a template that does not parse (TemplateSyntaxError, with its line) or that
    raises (`raise_exception`, an undefined name) is the target's input problem, not a crash of ours."""
    import jinja2

    try:
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True,
                                             enable_thinking=enable_thinking)
    except jinja2.TemplateSyntaxError as exc:
        raise InputError(getattr(tokenizer, "template_file", None), f"the chat template does not parse: "
                                                                    f"TemplateSyntaxError at line {exc.lineno}: {exc.message}") from None
    except (jinja2.TemplateError, TypeError, ValueError, KeyError, IndexError, AttributeError, ZeroDivisionError) as exc:
        # raise_exception(...), an undefined name, an operation on the wrong type: the template's own code failed
        raise InputError(getattr(tokenizer, "template_file", None), f"the chat template raises on a conversation "
                                                                    f"({type(exc).__name__}: {exc})") from None


def max_positions(path: Path) -> int | None:
    """The target's maximum positions (max_position_embeddings, text_config first), if it declares one."""
    raw = read_json_object(Path(path) / "config.json", missing="not a model folder: no config.json")
    value = (raw.get("text_config") or {}).get("max_position_embeddings", raw.get("max_position_embeddings"))
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None


def check_prompt_lengths(path: Path, lengths: dict[str, int], max_new_tokens: int) -> None:
    """Refuse, naming the prompt, when prompt + max_new_tokens exceeds the target's maximum positions:
    RoPE past the trained range gives numbers that mean nothing, silently."""
    limit = max_positions(path)
    if limit is None:
        return
    for prompt_id, length in lengths.items():
        if length + max_new_tokens > limit:
            raise InputError(path, f"prompt {prompt_id!r} has {length} tokens + --max-new-tokens {max_new_tokens} "
                                   f"= {length + max_new_tokens} > the target's max_position_embeddings {limit}; "
                                   "shorten the prompt or lower --max-new-tokens")


def indexed_device(device: torch.device | str) -> torch.device:
    """`device` with its index: bare `cuda` becomes the current CUDA device (`cuda:0` unless set otherwise).

    Why: tensors placed on `cuda` report `cuda:0`, and `torch.device("cuda:0") == torch.device("cuda")` is
    False, so a bare `cuda` matches none of them (the generation batch once counted 0 bytes of weights and
    chose 64 where the rule means 35 on a 27B on an 80 GB H100). Every device this package resolves
    (`resolve_device`, torchrun's rank device, the provenance, plan's and the GPU check's figures) goes
    through here, so `--device cuda`, `--device cuda:0`, `--device-map` and a rank name the device alike."""
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        return torch.device("cuda", torch.cuda.current_device())
    return device


def resolve_device(device: str) -> torch.device:
    """--device as an indexed device (`indexed_device`): auto -> the current CUDA device, or the CPU."""
    if device == "auto":
        return indexed_device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    import re

    if not re.fullmatch(r"cpu|cuda(:\d+)?", device):
        raise InputError(None, f"unknown --device {device!r} (choose auto, cpu, cuda or cuda:N)")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise InputError(None, f"--device {device} requested but torch sees no CUDA device")
    if ":" in device and int(device.split(":")[1]) >= torch.cuda.device_count():
        raise InputError(None, f"--device {device}: torch sees {torch.cuda.device_count()} CUDA device(s)")
    return indexed_device(device)


def device_memory_bytes(device: torch.device) -> int:
    """The total memory of a CUDA device, as CUDA reports it (never the free memory of the moment)."""
    return int(torch.cuda.get_device_properties(indexed_device(device)).total_memory)


def parameter_bytes(*modules: nn.Module) -> int:
    """Bytes of the distinct parameters of `modules`, wherever each is placed (a tied table once; a
    parameter accelerate offloaded to `meta` by its shape and dtype). Buffers (RoPE frequencies, a few KB)
    are left out, as plan's arithmetic (core/roofline.weight_bytes) leaves them out."""
    distinct = {id(p): p for m in modules for p in m.parameters()}
    return sum(p.nbytes for p in distinct.values())


def resolve_dtype(dtype: str, device: torch.device) -> torch.dtype:
    if dtype == "auto":  # bf16 on GPU (what serving uses), fp32 on CPU (exact, and fast enough there)
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    choices = {"bfloat16": torch.bfloat16, "float32": torch.float32, "float16": torch.float16}
    if dtype not in choices:
        raise InputError(None, f"unknown --dtype {dtype!r} (choose auto, bfloat16, float32)")
    return choices[dtype]


@contextmanager
def quiet_weight_loading():
    """transformers quiet while a local model loads: its "Loading weights" bar (it reached every command's
    stderr, over our own progress lines) and its LOAD REPORT, which lists missing and unexpected tensors with
    terminal colour codes and the raw path (`refuse_incomplete_weights` refuses those instead, by name). The
    Hugging Face hub's download bars and transformers' verbosity are given back afterwards."""
    from transformers.utils import logging as hf_logging

    was = hf_logging.is_progress_bar_enabled()
    level = hf_logging.get_verbosity()
    hf_logging.disable_progress_bar()  # also the hub's: given back below
    hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        hf_logging.set_verbosity(level)
        if was:
            hf_logging.enable_progress_bar()


def load_target(name_or_path: str, *, device: str = "auto", dtype: str = "auto",
                allow_accelerated_on_cpu: bool = False, device_map: str | dict | None = None,
                max_memory: dict | None = None, offload_folder: str | None = None) -> Target:
    """Load a target (local folder or HF cache name, offline). `allow_accelerated_on_cpu` is for callers
    that route the kernels to the torch fallback themselves (`torch_fallback_kernels`).

    `device_map` ("auto", "balanced", "sequential" or a dict) splits one target over several devices
    through accelerate (transformers' `device_map`, with `max_memory`); the taps are then gathered from
    each layer's device onto the device of the input embedding, where the drafters also run."""
    from transformers import AutoModelForCausalLM

    path = resolve_local_or_cached(name_or_path)
    info = target_info(path)
    dev = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, dev)
    tokenizer = load_tokenizer(path)
    import importlib.util

    if importlib.util.find_spec("accelerate") is None:  # transformers refuses every device_map without it
        raise InputError(None, "the accelerate package is missing: dflash-eval loads every target through "
                               "transformers' device_map, which needs it (a base dependency: pip install -e ., "
                               "or pip install 'accelerate>=0.30')")
    if device_map is not None:
        extra = {"device_map": device_map, "max_memory": max_memory, "offload_folder": offload_folder}
    else:  # straight onto the device: never the whole model staged in host RAM first
        extra = {"device_map": {"": dev}}
    try:
        with quiet_weight_loading():  # its bar and report (raw ANSI, the path unescaped) are said by us instead
            model, loading = AutoModelForCausalLM.from_pretrained(
                path, dtype=torch_dtype, local_files_only=True, output_loading_info=True, use_kernels=False,
                ignore_mismatched_sizes=True, **extra)  # (a mismatch is refused below, by name)
    except (OSError, ValueError, KeyError) as exc:
        raise InputError(path, f"cannot load target: {str(exc).splitlines()[0]}") from None
    refuse_incomplete_weights(loading, path)
    if dev.type == "cpu":  # before the probe forward, which is the first to reach the fallback
        quiet_cpu_fallback_advice()
    refuse_accelerated_on_cpu(model, path, dev, allow_accelerated_on_cpu)
    if device_map is not None:  # dispatched: inputs, taps and drafters live where the input embedding is
        dev = input_device(model)
    model.eval().requires_grad_(False)
    return Target(model=model, tokenizer=tokenizer, name=str(name_or_path), path=path, device=dev,
                  dtype=torch_dtype, info=TargetInfo(str(name_or_path), info.num_layers, info.hidden_size,
                                                      model.get_input_embeddings().weight.shape[0]),
                  layers=decoder_layers(model))


def refuse_incomplete_weights(loading: dict, path: Path) -> None:
    """A target gets the weight-presence check a drafter gets (formats/validation: 'weights present', 'no
    unexpected weights', 'weight shapes'), read from transformers' own record of the load (`output_loading_info`,
    after its key renaming, the tied and the deliberately ignored tensors): a tensor the model has and the
    files lack was initialised at random and would be evaluated as if trained; a tensor the files hold and the
    model has no place for, or one of another shape, means files of another model. One line naming the
    weights and the first tensors."""
    from ..formats.files import weight_files

    files = weight_files(path)
    where = files[0] if len(files) == 1 else Path(path) / "model.safetensors.index.json"
    for key, problem in (("missing_keys", "lack {tensors} the model has ({names}); transformers would initialise "
                                          "them at random and the target would not be the one trained"),
                         ("unexpected_keys", "hold {tensors} this model has no place for ({names}): weights of another "
                                             "model or architecture"),
                         ("mismatched_keys", "hold {tensors} of another shape than the config gives ({names})")):
        found = sorted(str(k[0] if isinstance(k, tuple) else k) for k in loading.get(key) or ())
        if found:
            names = ", ".join(found[:3]) + (", ..." if len(found) > 3 else "")
            tensors = f"{len(found)} tensor{'s' if len(found) > 1 else ''}"
            raise InputError(where, "the target's weights " + problem.format(tensors=tensors, names=names))


def refuse_accelerated_on_cpu(model: nn.Module, path: Path, dev: torch.device, allowed: bool) -> None:
    """One line instead of a Triton crash: a Gated-DeltaNet layer that calls an fla kernel on a CPU run (the
    probe forward reaches the kernel; its crash is caught and named). Only CPU runs are probed here: on a GPU
    the report is taken where provenance needs it, under the run's `--kernels` choice."""
    if dev.type == "cuda" or allowed:
        return
    accelerated = [k for k in kernel_report(model) if k.accelerated]
    if accelerated:
        k = accelerated[0]
        raise InputError(path, f"Gated-DeltaNet layer {k.layer} calls the kernel {k.function}, which needs CUDA, "
                               "but this run is on CPU; run with --device cuda, or uninstall flash-linear-attention/triton "
                               "for a CPU run (torch fallback)")


def input_device(model: nn.Module) -> torch.device:
    """Where input ids, taps and drafters go: the input embedding's device. When accelerate offloaded the
    embedding (its weight on `meta`), the device its hook runs it on, from `hf_device_map` (the longest
    entry that contains the embedding; "disk" and "cpu" mean the CPU). A target that fits one device has no
    `hf_device_map` at all: its embedding's weight says where it is."""
    embedding = model.get_input_embeddings()
    placed = getattr(model, "hf_device_map", None) or {}
    if embedding.weight.device.type != "meta" or not placed:
        return embedding.weight.device
    name = next((n for n, m in model.named_modules() if m is embedding), "")
    owners = [k for k in placed if k == "" or name == k or name.startswith(k + ".")]
    if not owners:
        return embedding.weight.device
    where = placed[max(owners, key=len)]
    if isinstance(where, int):
        return torch.device(f"cuda:{where}")
    return indexed_device("cpu" if where == "disk" else where)


@dataclass
class Capture:
    """What one tap pass over a sequence yields."""

    taps: torch.Tensor  # [T, len(taps) * H], the chosen layers' outputs concatenated in tap order
    greedy: torch.Tensor  # [T] the target's argmax next token after every position
    hidden: torch.Tensor | None = None  # [T, H] final-norm hidden states (lm_head(hidden) = logits), when kept


def _layer_output(output) -> torch.Tensor:
    return output[0] if isinstance(output, tuple) else output


@contextmanager
def hooked_layers(target: Target, taps: list[int]):
    """Capture the outputs of the chosen decoder layers during the forwards run inside the block.

    Yields a function returning the concatenation [T, len(taps) * H] in `taps` order for the last
    forward. Only the chosen layers are kept: never all L+1 hidden states."""
    for t in set(taps):
        if not 0 <= t < len(target.layers):
            raise InputError(target.path, f"tap {t} is outside the target's {len(target.layers)} layers")
    captured: dict[int, torch.Tensor] = {}
    # .to(target.device): on a target split over devices each layer's output lives on its own device
    handles = [target.layers[t].register_forward_hook(
        lambda _m, _i, out, t=t: captured.__setitem__(t, _layer_output(out)[0].to(target.device)))
        for t in sorted(set(taps))]
    try:
        yield lambda: torch.cat([captured[t] for t in taps], dim=-1)
    finally:
        for handle in handles:
            handle.remove()


@torch.inference_mode()
def capture_taps(target: Target, input_ids: torch.Tensor, taps: list[int], *, logits_chunk: int = 1024,
                 sequence_chunk: int | None = None, keep_hidden: bool = False) -> Capture:
    """One pass over `input_ids` ([T] or [1, T]): hooked layer outputs plus greedy tokens.

    `sequence_chunk` bounds activation memory on long sequences: the pass then runs as a chunked prefill
    with the KV/recurrent cache (same states up to floating-point effects of the chunking). Logits are
    computed in chunks of positions (vocabularies reach 248K: a 4K-token sequence would need ~4 GB of bf16
    logits at once) and reduced to argmax immediately, in the lm_head's cache-sized pieces (model/lm_head.py)."""
    ids = input_ids.view(1, -1).to(target.device)
    base = target.model.model
    step = sequence_chunk or ids.shape[1]
    hidden_parts, tap_parts, cache = [], [], None
    with hooked_layers(target, taps) as read_taps:
        for start in range(0, ids.shape[1], step):
            kwargs: dict = {"use_cache": step < ids.shape[1]}
            if cache is not None:
                kwargs[cache_keyword(base)] = cache
            out = base(input_ids=ids[:, start:start + step], **kwargs)
            cache = output_cache(out) if kwargs["use_cache"] else None
            hidden_parts.append(out.last_hidden_state[0].to(target.device))
            tap_parts.append(read_taps())
    hidden = torch.cat(hidden_parts)
    tap_states = torch.cat(tap_parts)
    target.tap_passes += 1
    greedy = torch.cat([greedy_ids(hidden[i:i + logits_chunk], target.lm_head)
                        for i in range(0, hidden.shape[0], logits_chunk)])
    return Capture(taps=tap_states, greedy=greedy, hidden=hidden if keep_hidden else None)


@torch.inference_mode()
def cached_step(target: Target, input_ids: torch.Tensor, taps: list[int], cache=None, *, last_logits: bool = False):
    """Incremental forward with a KV/recurrent cache (the live loop's prefill and verify passes).

    Returns (taps [n, len(taps) * H], logits [n, V], cache); with `last_logits` the logits of the last
    position only ([1, V]: `logits_to_keep=1`, as generate's prefill asks; a 32K-token prefill's logits over a
    248K vocabulary would be 16 GB in bf16). The caller owns snapshot/restore."""
    ids = input_ids.view(1, -1).to(target.device)
    kwargs: dict = {"use_cache": True}
    if last_logits:
        kwargs["logits_to_keep"] = 1
    if cache is not None:
        kwargs[cache_keyword(target.model)] = cache
    with hooked_layers(target, taps) as read_taps:
        out = target.model(input_ids=ids, **kwargs)
        tap_states = read_taps()
    return tap_states, out.logits[0], output_cache(out)


@torch.inference_mode()
def lens_tokens(target: Target, states: torch.Tensor, chunk: int = 1024, *, plain_norm: bool = False) -> torch.Tensor:
    """The logit lens of a layer's outputs: argmax of lm_head(final_norm(h)) per position ([T] ids on CPU), the
    lm_head in cache-sized pieces (model/lm_head.py).
    For the last layer this is the target's own greedy token. `plain_norm`: the final norm's weight applied
    as `x * w` even where the target applies `x * (1 + w)` (Qwen3.5 / Qwen3-Next): the mis-scaled teacher of
    speculators <= 0.8.1 (commands/doctor_norm.py)."""
    norm = target.model.model.norm
    if plain_norm:
        eps = getattr(norm, "eps", getattr(norm, "variance_epsilon", 1e-6))

        def norm(h):  # the RMS normalisation of both conventions, then the plain gain
            x = h.float()
            return (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * target.model.model.norm.weight.float()).to(h.dtype)
    return torch.cat([greedy_ids(norm(states[i:i + chunk].to(target.device)), target.lm_head).cpu()
                      for i in range(0, states.shape[0], chunk)])


def stop_token_ids(target: "Target") -> list[int]:
    """End-of-turn / EOS ids: the generation config's list plus the tokenizer's eos."""
    ids: set[int] = set()
    configured = getattr(getattr(target.model, "generation_config", None), "eos_token_id", None)
    if isinstance(configured, int):
        ids.add(configured)
    elif configured:
        ids.update(int(i) for i in configured)
    if target.tokenizer.eos_token_id is not None:
        ids.add(int(target.tokenizer.eos_token_id))
    return sorted(ids)
