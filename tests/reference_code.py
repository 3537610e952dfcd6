"""Thin calls into the reference implementations' OWN code, for the conformance tests.

Nothing here restates DFlash: every function loads a reference package and runs its code.

- `zlab_generate`: z-lab's `dflash==0.1.0` (`dflash/model.py`): its `DFlashDraftModel.from_pretrained` (no
  trust_remote_code) and its live speculative loop `dflash_generate` at temperature 0. The only thing
  replaced is its CUDA timer `_cuda_time` (it calls `torch.cuda.synchronize()`), by `time.perf_counter`,
  inside a context manager that restores it.
- `zlab_block_logits`: z-lab's drafter forward + `compute_logits` for chosen anchors, each block built as
  `dflash_generate` builds it (its own `_raw_input_embeddings`, `_draft_value`, `extract_context_feature`).
- `speculators_logits`: `speculators==0.9.0`'s `DFlashDraftModel.from_pretrained` on a speculators-format
  folder (which reloads the embedding / lm_head / verifier norm from the recorded verifier, see
  `load_verifier_weights`), then its training forward `_backbone_forward` with `select_anchors` (the only
  random part: it draws anchors) swapped for one returning the anchors we choose. Its mask code
  (`create_anchor_block_mask_mod`), layers, RoPE, norms and lm_head run untouched.
- `speculators_taps`: the auxiliary hidden states as speculators/vLLM number them (id k = the residual
  stream after k decoder layers = HF `output_hidden_states[k]`), read from HF's own tuple, so that the
  tap numbering is exercised independently of dflash-eval's hooks.
- `speculators_convert`: speculators' own `DFlashConverter` (z-lab format -> speculators format).

The reference packages pin other torch/transformers versions; they are installed with `--no-deps` by
`scripts/bootstrap.sh test` (see the `conformance` extra in pyproject.toml for their import-time deps).
"""

from __future__ import annotations

import contextlib
import importlib
import time
from pathlib import Path

import pytest
import torch

INSTALL = ("scripts/bootstrap.sh test   (or: .venv/bin/python -m pip install -e '.[test,conformance]' && "
           ".venv/bin/python -m pip install --no-deps dflash==0.1.0 speculators==0.9.0)")

# The attention implementation speculators' drafter runs with here. speculators defaults to its
# "simple_flex_attention", whose mask is built by a `torch.compile`d `create_block_mask` (an inductor C++
# build on CPU) and whose attention runs flex_attention's unfused CPU path; "sdpa" takes the SAME
# `create_anchor_block_mask_mod` through torch's `create_mask` into a dense boolean mask, which is exact
# and fast on CPU. `SPECULATORS_ATTN` lets a caller switch (tests pass "simple_flex_attention" once).
SPECULATORS_ATTN = "sdpa"


def require(name: str):
    """Import a reference package (e.g. "dflash.model", "speculators.models.dflash.core"); fail, never
    skip, when it is missing, with the install command."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:  # ModuleNotFoundError included
        pytest.fail(f"reference package missing for the conformance tests ({name}: {exc}). Install it with: "
                    f"{INSTALL}", pytrace=False)


# ---------------------------------------------------------------------------------------------------
# z-lab


@contextlib.contextmanager
def _cpu_timer(module):
    """z-lab's `_cuda_time` synchronizes CUDA; on CPU time.perf_counter is the same clock without it."""
    original = module._cuda_time
    module._cuda_time = time.perf_counter
    try:
        yield
    finally:
        module._cuda_time = original


def zlab_drafter(drafter_dir: str | Path):
    """z-lab's own `DFlashDraftModel.from_pretrained` (fp32, CPU); refuses silently dropped weights."""
    zlab = require("dflash.model")
    model, info = zlab.DFlashDraftModel.from_pretrained(str(drafter_dir), dtype=torch.float32,
                                                        output_loading_info=True)
    problems = {k: v for k, v in info.items() if v and k in ("missing_keys", "unexpected_keys", "mismatched_keys")}
    if problems:
        raise AssertionError(f"{drafter_dir}: z-lab's DFlashDraftModel did not load cleanly: {problems}")
    return model.eval()


def zlab_generate(target_model, drafter_dir: str | Path, input_ids: list[int], max_new_tokens: int,
                  stop_token_ids: list[int], *, drafter=None, temperature: float = 0.0, top_p: float = 1.0,
                  top_k: int = 0) -> tuple[list[int], list[int]]:
    """(new token ids, acceptance_lengths) of z-lab's `dflash_generate` (temperature 0 unless given; at
    temperature > 0 it draws from torch's global generator: seed it before the call).

    `target_model` is the HF `...ForCausalLM` (dflash_eval's `Target.model`). The returned ids are the
    tokens after the prompt (up to and including a stop token, at most `max_new_tokens`);
    `acceptance_lengths` is z-lab's own per-step record (tokens committed by each verify step)."""
    zlab = require("dflash.model")
    model = drafter if drafter is not None else zlab_drafter(drafter_dir)
    ids = torch.tensor([list(input_ids)], dtype=torch.long, device=target_model.device)
    with _cpu_timer(zlab):
        out = zlab.dflash_generate(model, target_model, ids, max_new_tokens, list(stop_token_ids),
                                   temperature=temperature, top_p=top_p, top_k=top_k, return_stats=True)
    return out.output_ids[0, len(input_ids):].tolist(), [int(n) for n in out.acceptance_lengths]


@torch.inference_mode()
def zlab_block_logits(model, target_model, input_ids: list[int], anchors: list[int],
                      block_lengths: list[int] | None = None) -> torch.Tensor:
    """Logits [sum(block_lengths), vocab] of z-lab's own drafter forward, one block per anchor, slot 0 included.

    Each block is built as `dflash_generate` builds it: `[token at anchor, MASK, ...]` embedded with the
    target's table times `input_embedding_scale` (`_raw_input_embeddings`, `_draft_value`), context = the
    target features of positions 0..a-1 (`extract_context_feature` over HF `output_hidden_states`),
    `position_ids` 0..a+L-1, no cache (the loop's cache holds exactly those context keys), then
    `compute_logits` with the target's head (`output_multiplier`, `final_logit_softcapping`). This runs
    z-lab's attention `__init__`/`_attention_mask` rules where its loop cannot run (its HF cache refuses a
    sliding layer whose window `use_sliding_window` nulled)."""
    zlab = require("dflash.model")
    device = target_model.device
    ids = torch.tensor([list(input_ids)], dtype=torch.long, device=device)
    states = target_model(input_ids=ids, output_hidden_states=True).hidden_states
    features = zlab.extract_context_feature(states, model.target_layer_ids)
    scale = float(zlab._draft_value(model.config, "input_embedding_scale", 1.0))
    head = zlab._output_head(target_model)
    lengths = [model.block_size] * len(anchors) if block_lengths is None else list(block_lengths)
    parts = []
    for anchor, length in zip(anchors, lengths, strict=True):
        if not 0 < anchor < len(input_ids):
            raise ValueError(f"anchor {anchor} outside 1..{len(input_ids) - 1} (z-lab needs context)")
        block = torch.full((1, length), int(model.mask_token_id), dtype=torch.long, device=device)
        block[0, 0] = int(input_ids[anchor])
        noise = zlab._raw_input_embeddings(target_model, block, scale)
        hidden = model(target_hidden=features[:, :anchor], noise_embedding=noise,
                       position_ids=torch.arange(anchor + length, device=device)[None], past_key_values=None,
                       use_cache=False)
        parts.append(model.compute_logits(hidden, head)[0])
    return torch.cat(parts)


def zlab_tau(acceptance_lengths_per_prompt: list[list[int]]) -> float:
    """z-lab's published tau: mean over prompts of each prompt's mean acceptance length."""
    per_prompt = [sum(a) / len(a) for a in acceptance_lengths_per_prompt if a]
    return sum(per_prompt) / len(per_prompt)


# ---------------------------------------------------------------------------------------------------
# speculators


def speculators_drafter(drafter_dir: str | Path, attn_implementation: str | None = None):
    """speculators' own `DFlashDraftModel.from_pretrained` (fp32, CPU) with the chosen attention backend.

    The backend is set on the config's `transformer_layer_config` before the model is built, which is
    what speculators' own trainer does (`draft_attn_impl`); None keeps speculators' default."""
    core = require("speculators.models.dflash.core")
    attn = SPECULATORS_ATTN if attn_implementation is None else attn_implementation
    config = core.DFlashSpeculatorConfig.from_pretrained(str(drafter_dir))
    if attn is not None:
        config.transformer_layer_config._attn_implementation = attn
    model = core.DFlashDraftModel.from_pretrained(str(drafter_dir), config=config, dtype=torch.float32)
    for name in ("embed_tokens.weight", "lm_head.weight", "fc.weight"):
        if torch.isnan(model.state_dict()[name]).any():
            raise AssertionError(f"{drafter_dir}: speculators left {name} unloaded (NaN); is "
                                 "speculators_config.verifier.name_or_path a target folder?")
    return model.float().eval()


@contextlib.contextmanager
def _fixed_anchors(core, anchors: list[int]):
    """speculators draws anchors at random in `select_anchors`; return ours instead (all valid)."""
    original = core.select_anchors

    def chosen(loss_mask, num_anchors, block_size):
        device = loss_mask.device
        if num_anchors != len(anchors):
            raise AssertionError(f"speculators asked for {num_anchors} anchors, {len(anchors)} were given")
        return (torch.tensor(anchors, dtype=torch.long, device=device),
                torch.ones(len(anchors), dtype=torch.bool, device=device))

    core.select_anchors = chosen
    try:
        yield
    finally:
        core.select_anchors = original


@torch.inference_mode()
def speculators_taps(target_model, input_ids: list[int], aux_hidden_state_layer_ids: list[int]) -> torch.Tensor:
    """[T, n * H]: HF `output_hidden_states[k]` for speculators' ids k (residual after k layers), in order.
    (k = num_layers would be HF's post-final-norm state, which speculators never uses as an aux layer.)"""
    ids = torch.tensor([list(input_ids)], dtype=torch.long, device=target_model.device)
    states = target_model(input_ids=ids, output_hidden_states=True).hidden_states
    n_layers = len(states) - 1
    if any(not 0 < k < n_layers for k in aux_hidden_state_layer_ids):
        raise ValueError(f"aux ids {aux_hidden_state_layer_ids} outside 1..{n_layers - 1}")
    return torch.cat([states[k][0] for k in aux_hidden_state_layer_ids], dim=-1)


@torch.inference_mode()
def speculators_logits(drafter_dir: str | Path | None, taps: torch.Tensor, input_ids: list[int],
                       anchors: list[int], *, drafter=None, attn_implementation: str | None = None) -> torch.Tensor:
    """Logits [len(anchors) * B, draft_vocab] of speculators' `_backbone_forward` for blocks at `anchors`.

    taps: [T, n_aux * H] aux hidden states (see `speculators_taps`); input_ids: the T token ids. The
    sequence is padded with B rows of document id -1 so that a block near the end indexes inside it
    (speculators' own anchor sampler keeps anchors B rows from the end); padding rows are never visible
    (other document, and after every anchor)."""
    core = require("speculators.models.dflash.core")
    model = drafter if drafter is not None else speculators_drafter(drafter_dir, attn_implementation)
    B = model.block_size
    T = len(input_ids)
    if taps.shape[0] != T:
        raise ValueError(f"taps has {taps.shape[0]} rows for {T} tokens")
    if any(not 0 <= a < T for a in anchors):
        raise ValueError(f"anchors must lie in 0..{T - 1}")
    dtype = next(model.parameters()).dtype
    hidden = torch.cat([taps.to(dtype), torch.zeros(B, taps.shape[1], dtype=dtype)])[None]
    ids = torch.tensor([list(input_ids) + [0] * B], dtype=torch.long)
    loss_mask = torch.tensor([[1] * T + [0] * B], dtype=torch.long)
    document_ids = torch.tensor([[0] * T + [-1] * B], dtype=torch.long)
    verifier_last = torch.zeros(1, T + B, model.config.transformer_layer_config.hidden_size, dtype=dtype)
    with _fixed_anchors(core, list(anchors)):
        _, logits, _, _, _ = model._backbone_forward(hidden, ids, loss_mask, verifier_last, document_ids,
                                                      max_anchors=len(anchors))
    return logits[0]


def speculators_convert(zlab_dir: str | Path, out_dir: str | Path, verifier_dir: str | Path) -> Path:
    """speculators' own converter, z-lab format -> speculators format (with its own reload validation)."""
    converter = require("speculators.convert.dflash.converter")
    converter.DFlashConverter().convert(str(zlab_dir), str(out_dir), base_model=str(verifier_dir), validate=True)
    return Path(out_dir)
