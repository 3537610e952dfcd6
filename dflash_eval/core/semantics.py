"""Which reference's rules a drafter is evaluated under: per-layer attention and the scale/cap keys.

z-lab's `dflash` package and speculators read the same attention config keys differently, and both are
"the" definition of their own checkpoint format. So a checkpoint's attention is stored as the raw keys
it declares (`AttentionConfig`, normalized exactly as both references normalize it: through
transformers' `Qwen3Config`), and the per-layer rule is derived from those keys under one named rule set:

| rule set      | source (read in the package itself)                          | window measured from | in-block causality                  |
|---------------|--------------------------------------------------------------|----------------------|-------------------------------------|
| `zlab`        | dflash 0.1.0 `dflash/model.py`: `Qwen3DFlashAttention.__init__`, | the query: key k visible iff q - k < W (and k - q < W when not causal), context and block alike | sliding layers causal, full layers bidirectional; a top-level `is_causal` sets every layer |
|               | `_attention_mask`, `_draft_value`, `DFlashDraftModel.compute_logits` |                      |                                     |
| `speculators` | speculators 0.9.0 `models/dflash/attention.py`: `create_anchor_block_mask_mod`; `models/dflash/core.py`: `DFlashDraftModel.__init__`, `_build_attention_mask` | the anchor: context rows a - W <= p < a, no window inside the block | sliding layers causal unless `sliding_window_non_causal`; full layers (and sliding layers without a window) bidirectional |

| `vllm`        | vLLM 0.33.0 `qwen3_dflash.py`: `_dflash_layer_causal`; speculators config adapter `update_dflash` | the query (FlashAttention / Triton sliding window on absolute positions) | top-level `is_causal`, else `dflash_config.causal`, else sliding causal / full bidirectional; a speculators checkpoint gets one causality for all layers, `not sliding_window_non_causal` (absent: bidirectional) |

Both: context row p is visible only if p < a (the anchor's own hidden state is never context).
`use_sliding_window` false or missing nulls the window (HF `Qwen3Config`): z-lab then runs such a sliding
layer causal without a window, speculators fully bidirectional. z-lab also reads `input_embedding_scale`
(block embeddings), `output_multiplier` and `final_logit_softcapping` (logits), from `dflash_config` first
and the top level second (`_draft_value`); speculators reads none of them, nor does vLLM's DFlash drafter.

RoPE: `partial_rotary_factor` is ignored by transformers' Qwen3 rotary (z-lab, speculators: the whole head
rotates); vLLM rotates only its first int(head_dim * factor) dims (`rotary_dim`, ROTARY_SOURCE).

Serving rules `vllm` adds beyond attention and RoPE (each a conformance note: `VLLM_SERVING_RULES`):
- final block: vLLM drafts a full block of 1 + num_speculative_tokens queries whatever is left of the
  request, and its scheduler trims the drafts only at max_model_len, never at max_tokens; so under `vllm`
  the block near the length cap stays full (`shorter_final_block`), whatever `--final-block` says.
  vLLM's counters are taken from the verified block before the stop check, so its last step can count
  drafts accepted past max_tokens or the stop token; no target token exists there offline: not counted
  (at most B - 1 tokens per request; `served` compares against such counters).
- draft sampling at T > 0: `draft_sample_method` greedy (vLLM's default: argmax drafts, q one-hot in the
  rejection test) is `--draft-policy argmax`; probabilistic is `--draft-policy sample` with the drafter's
  distribution softmax(logits / T): vLLM ignores top-p / top-k for drafts (`draft_top_filters`), the
  target's p keeps them. `rejection_sample_method` synthetic / block are not modelled (no option takes them).

Two servers more, `sglang` and `llamacpp` (SGLang 0.5.23, llama.cpp's DFlash): their rules and what is
refused under them live in engine_rules.py; `doctor --engines` scores one drafter under all five.

A checkpoint's format picks its rule set by default; `--semantics` overrides it, and the choice and its
reason are recorded in the spec (so in `inspect`, provenance and every report).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any, Literal

from . import engine_rules
from .attention import AttentionConfig, LayerAttention, Scales

if TYPE_CHECKING:
    from .spec import DrafterSpec

Semantics = Literal["zlab", "speculators", "vllm", "sglang", "llamacpp", "deepspec"]
SEMANTICS: tuple[str, ...] = ("zlab", "speculators", "vllm", *engine_rules.ENGINE_RULES)
# the rule sets doctor's variants try (a trainer or vLLM); the other engines: `doctor --engines`
VARIANT_SEMANTICS: tuple[str, ...] = ("zlab", "speculators", "vllm")

RULE_SOURCES = {
    "zlab": "dflash 0.1.0 dflash/model.py (Qwen3DFlashAttention.__init__, _attention_mask)",
    "speculators": "speculators 0.9.0 models/dflash/attention.py (create_anchor_block_mask_mod), "
                   "core.py (DFlashDraftModel._build_attention_mask)",
    "vllm": "vLLM 0.33.0 model_executor/models/qwen3_dflash.py (_dflash_layer_causal, _resolve_layer_attention), "
            "transformers_utils/configs/speculators/algos.py (update_dflash), v2 DFlash speculator",
    **engine_rules.SOURCES,
}
SCALE_SOURCE = "dflash 0.1.0 dflash/model.py (_draft_value, dflash_generate, DFlashDraftModel.compute_logits)"

FORMAT_SEMANTICS = {"zlab": "zlab", "speculators": "speculators", "deepspec": "deepspec"}


def layers_under(config: AttentionConfig, semantics: str) -> tuple[tuple["LayerAttention", ...], str]:
    """Per-layer attention under one rule set, and a sentence saying where each setting came from."""
    if semantics == "zlab":
        layers = []
        for kind in config.layer_types:
            sliding = kind == "sliding_attention"
            causal = sliding if config.is_causal is None else bool(config.is_causal)
            window = config.sliding_window if sliding else None
            layers.append(LayerAttention("sliding" if sliding else "full", window, causal,
                                         window_from="query"))
        why = (f"z-lab rules: top-level is_causal={config.is_causal} on every layer" if config.is_causal is not None
               else "z-lab rules: sliding layers causal, full layers bidirectional (no is_causal key)")
        if config.sliding_window is None and "sliding_attention" in config.layer_types:
            why += "; no window (use_sliding_window is false or missing)"
        return tuple(layers), why
    if semantics == "speculators":
        non_causal = bool(config.sliding_window_non_causal)
        layers = []
        for kind in config.layer_types:
            sliding = kind == "sliding_attention"
            window = config.sliding_window if sliding else None
            # speculators: "always non-causal for full attention", and a sliding layer without a window
            # gets the full-attention mask
            causal = sliding and window is not None and not non_causal
            layers.append(LayerAttention("sliding" if sliding else "full", window, causal, window_from="anchor"))
        why = ("speculators rules: " + (f"sliding_window_non_causal={config.sliding_window_non_causal}"
                                        if config.sliding_window_non_causal is not None
                                        else "sliding_window_non_causal absent (false)")
               + "; full layers bidirectional")
        if config.sliding_window is None and "sliding_attention" in config.layer_types:
            why += "; sliding layers without a window are full bidirectional (use_sliding_window false or missing)"
        return tuple(layers), why
    if semantics == "vllm":
        # _dflash_layer_causal: top-level is_causal, then dflash_config.causal, then the layer type; the
        # speculators adapter writes dflash_config.causal = not sliding_window_non_causal (absent: True)
        uniform = config.is_causal
        if uniform is None:
            uniform = config.dflash_causal
        if uniform is None and config.format == "speculators":
            uniform = not (True if config.sliding_window_non_causal is None else config.sliding_window_non_causal)
        layers = []
        for kind in config.layer_types:
            sliding = kind == "sliding_attention"
            causal = sliding if uniform is None else bool(uniform)
            layers.append(LayerAttention("sliding" if sliding else "full", config.sliding_window if sliding else None,
                                         causal, window_from="query"))
        why = ("vLLM rules: " + (f"one causality for every layer ({'causal' if uniform else 'bidirectional'})"
                                 if uniform is not None else "sliding layers causal, full layers bidirectional")
               + " (per-layer as the V2 runner; the V1 proposer runs a mixed drafter bidirectional)")
        return tuple(layers), why
    if semantics in engine_rules.ENGINE_RULES:
        return engine_rules.layers_under(config, semantics)
    raise ValueError(f"unknown semantics {semantics!r} (choose from {', '.join(SEMANTICS)})")


def effective_scales(scales: Scales, semantics: str) -> tuple[float, float, float | None]:
    """(embedding scale, logit multiplier, softcap) applied under a rule set; speculators reads none."""
    if semantics != "zlab":
        return 1.0, 1.0, None
    cap = scales.final_logit_softcapping
    return (1.0 if scales.input_embedding_scale is None else float(scales.input_embedding_scale),
            1.0 if scales.output_multiplier is None else float(scales.output_multiplier),
            float(cap) if cap is not None and float(cap) > 0 else None)


ROTARY_SOURCE = ("vLLM 0.33.0 model_executor/layers/rotary_embedding/__init__.py (get_rope: rotary_dim = "
                 "int(head_size * partial_rotary_factor)), base.py (forward_static: rotates [..., :rotary_dim], "
                 "passes the rest); transformers 5 Qwen3RotaryEmbedding.compute_default_rope_parameters (whole head)")


def rotary_dim(rope: dict, head_dim: int, semantics: str, top_level: bool = False) -> int:
    """How many leading dims of each head RoPE rotates. vLLM honours `partial_rotary_factor` (a top-level key is
    moved into rope_parameters by its `patch_rope_parameters`); transformers' Qwen3 default rotary, which z-lab's
    code and speculators' trainer run, ignores it and rotates the whole head; SGLang reads `rope_dim`, else a
    top-level factor only (`top_level`: where the checkpoint declared it; engine_rules.sglang_rotary_dim)."""
    if semantics == "sglang":
        return engine_rules.sglang_rotary_dim(rope, head_dim, top_level)
    factor = rope.get("partial_rotary_factor")
    if semantics != "vllm" or factor is None:
        return head_dim
    return int(head_dim * float(factor))


def _rotary_checked(spec: "DrafterSpec", semantics: str) -> tuple[str, ...]:
    """Refuse what is not implemented by name; the note that says how the key is read under these rules."""
    from .errors import InputError

    notes = tuple(n for n in spec.config_notes if not n.startswith(("partial_rotary_factor", "rope_dim")))
    if spec.rope.get("rope_dim") is not None:
        served = rotary_dim(spec.rope, spec.head_dim, "sglang")
        if not 0 < served <= spec.head_dim or served % 2:
            raise InputError(spec.path, f"config key 'rope_dim'={spec.rope['rope_dim']!r} is not an even number of "
                                        f"dims in 2..{spec.head_dim}")
        notes = (*notes, f"rope_dim {served}: " + (f"SGLang rotates the first {served} dims of each head"
                                                   if semantics == "sglang" else
                                                   f"ignored under {semantics} rules (the whole head rotates); "
                                                   f"SGLang rotates {served} (--semantics sglang)"))
    factor = spec.rope.get("partial_rotary_factor")
    if factor is None or float(factor) == 1.0:
        return notes
    kind = spec.rope.get("rope_type", spec.rope.get("type", "default"))
    if kind != "default":
        raise InputError(spec.path, f"config key 'partial_rotary_factor'={factor} with rope_type {kind!r} is not "
                                    "implemented (only the default RoPE)")
    served = rotary_dim(spec.rope, spec.head_dim, "vllm")
    if not 0 < float(factor) <= 1 or served == 0 or served % 2:
        raise InputError(spec.path, f"config key 'partial_rotary_factor'={factor} gives an odd or empty rotary "
                                    f"dimension for head_dim {spec.head_dim}")
    if semantics == "vllm":
        return (*notes, f"partial_rotary_factor {factor}: RoPE rotates the first {served} of {spec.head_dim} dims "
                        "of each head, the rest pass unrotated (vLLM get_rope)")
    if semantics == "sglang":
        dims = rotary_dim(spec.rope, spec.head_dim, "sglang", spec.partial_rotary_top_level)
        return (*notes, f"partial_rotary_factor {factor}: SGLang rotates {dims} of {spec.head_dim} dims ("
                        + ("top-level key, an attribute of its transformers 5.19 config)" if spec.partial_rotary_top_level
                           else "declared in rope_parameters only, which SGLang does not read)"))
    return (*notes, f"partial_rotary_factor {factor} ignored: transformers' Qwen3 rotary rotates the whole head "
                    f"({spec.head_dim} dims); vLLM serves it rotating {served} (--semantics vllm)")


VLLM_SERVING_RULES = {
    "final block": ("vLLM 0.33 v1/spec_decode/dflash.py (DFlashProposer.set_inputs_first_pass: 1 + "
                    "num_speculative_tokens queries per request), v1/core/sched/scheduler.py (schedule: drafts trimmed "
                    "only at max_model_len - 1 - num_computed_tokens; update_from_output: spec-decode stats from the "
                    "verified block before check_stop)"),
    "draft sampling": ("vLLM 0.33 config/speculative.py (draft_sample_method: greedy default | probabilistic), "
                       "v1/spec_decode/eagle.py + llm_base_proposer.py (compute_probs_and_sample_next_token: "
                       "softmax(logits / T), 'we ignore most of the sampling parameters'), v1/sample/rejection_sampler.py "
                       "(greedy drafts: draft probs one-hot)"),
}
VLLM_NOTE = ("vLLM serving: full blocks up to the length cap (--final-block not applied); at T > 0 --draft-policy "
             "argmax is vLLM's default draft_sample_method greedy, sample is probabilistic (drafts from "
             "softmax(logits / T), no top-p / top-k); drafts vLLM counts past max_tokens or the stop token are not")


def shorter_final_block(semantics: str, requested: bool) -> bool:
    """Whether the block near the length cap is shortened to min(B, remaining + 1) slots: z-lab's loop does
    (the run's `--final-block`, default shorter); vLLM never does (VLLM_SERVING_RULES["final block"]), nor
    DeepSpec's evaluator (engine_rules.py)."""
    return False if semantics in ("vllm", "deepspec") else requested


def draft_top_filters(semantics: str) -> bool:
    """Whether top-p / top-k shape the drafter's distribution at T > 0: z-lab's `_sampling_probs` applies
    them to both models; vLLM's probabilistic drafts use the temperature only."""
    return semantics != "vllm"


def apply_semantics(spec: "DrafterSpec", semantics: str, why: str) -> "DrafterSpec":
    """The same checkpoint evaluated under `semantics`; `why` says who chose it (format default, override)."""
    if spec.attention_config is None:
        raise ValueError("this spec records no attention config to derive rules from")
    refused = engine_rules.refusal(spec, semantics)
    if refused:
        from .errors import InputError

        raise InputError(spec.path, f"--semantics {semantics}: {refused}")
    layers, causality = layers_under(spec.attention_config, semantics)
    # DFlash2: vLLM 0.33's qwen3_dflash2.py applies dflash_config's scales whatever the attention rules
    # (the same defaults and cap rule as z-lab's); a speculators DFlash2 checkpoint declares none
    embed_scale, multiplier, cap = effective_scales(spec.scales, "zlab" if spec.is_dflash2 else semantics)
    return replace(spec, layers=layers, causality_source=causality, semantics=semantics, semantics_source=why,
                   embedding_scale=embed_scale, output_multiplier=multiplier, logit_softcap=cap,
                   config_notes=tuple(n for n in _rotary_checked(spec, semantics)
                                      if not n.startswith(("vLLM serving:", "SGLang serving:", "llama.cpp serving:",
                                                               "DeepSpec's evaluator:")))
                   + ((VLLM_NOTE,) if semantics == "vllm" else ())
                   + ((engine_rules.NOTES[semantics],) if semantics in engine_rules.NOTES else ()),
                   rotary_semantics=None)


def served_differences(spec: "DrafterSpec") -> list[str]:
    """Every known way vLLM 0.33 serves this checkpoint differently from how it was trained and scored offline."""
    out = []
    factor = spec.rope.get("partial_rotary_factor")
    if factor is not None and float(factor) != 1.0:
        out.append(f"partial_rotary_factor {factor}: vLLM rotates {rotary_dim(spec.rope, spec.head_dim, 'vllm')} of "
                   f"{spec.head_dim} dims of each head, transformers (z-lab, speculators' trainer) the whole head")
    if spec.attention_config is not None:
        if set(spec.attention_config.layer_types) == {"sliding_attention", "full_attention"}:
            out.append("sliding and full layers mixed: vLLM 0.33 serves this drafter only on the V2 model runner "
                       "(qwen3_dflash.py _resolve_layer_attention)")
        if spec.semantics != "vllm":
            ours = [(x.window, x.causal_in_block, x.window_from) for x in spec.layers]
            theirs = [(x.window, x.causal_in_block, x.window_from)
                      for x in layers_under(spec.attention_config, "vllm")[0]]
            changed = [str(i) for i, (a, b) in enumerate(zip(ours, theirs)) if a != b]
            if changed:
                out.append(f"vLLM's attention rules differ from {spec.semantics}'s on layer(s) {', '.join(changed)}")
    return out


def describe(spec: "DrafterSpec") -> list[dict[str, Any]]:
    """One row per layer for `inspect`: the rule applied and the reference it follows."""
    rows = []
    for i, layer in enumerate(spec.layers):
        if layer.window is None:
            window = "no window"
        elif layer.window_from == "query":
            window = f"window {layer.window} from the query (q - k < {layer.window}, in block too)"
        elif layer.window_from == "query_left":
            window = f"window {layer.window} left of the query (q - k < {layer.window}; none to the right)"
        else:
            window = f"window {layer.window} from the anchor (a - {layer.window} <= p < a)"
        rows.append({"layer": i, "kind": layer.kind, "window": window,
                     "in_block": "causal" if layer.causal_in_block else "bidirectional",
                     "source": RULE_SOURCES.get(spec.semantics, spec.semantics)})
    return rows
