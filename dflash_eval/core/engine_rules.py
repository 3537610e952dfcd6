"""How two more servers read a DFlash checkpoint: `--semantics sglang` and `--semantics llamacpp`.

The same drafter accepts about 3 tokens on llama.cpp and 5.5 on vLLM (z-lab/dflash #170): the engines derive
a layer's attention from different keys. Each rule below is read in the engine's own code and honoured
exactly; what depends on code that was not read, or on a file the checkpoint is not (llama.cpp serves a
GGUF written by its converter), is refused by name. semantics.py dispatches here.

SGLang 0.5.23 (`srt/models/dflash.py`, `srt/speculative/dflash_utils.py`, transformers 5.19 as pinned):
- causality (`_get_dflash_attention_type`): the top-level `is_causal` for every layer; absent, full layers
  bidirectional (ENCODER_ONLY) and sliding layers causal (DECODER). `dflash_config.causal`, which vLLM
  honours, is not read.
- window (`get_dflash_attention_sliding_window_size`: W - 1 as window_left; FlashAttention's window
  (W - 1, 0) causal, (W - 1, W - 1) bidirectional in `flashattention_backend.py`): key k visible iff
  q - k < W, and k - q < W when bidirectional, context and block alike (z-lab's rule). `use_sliding_window`
  false (HF nulls the window) with sliding layers: SGLang raises "DFLASH sliding_attention layers require
  config.sliding_window", refused here by name.
- RoPE (`DFlashAttention.__init__`): `rope_parameters.rope_dim` (rope_scaling in transformers 4) sets the
  rotary dims; else the top-level `partial_rotary_factor` (an attribute under transformers 5.19) rotates
  int(head_dim x f); one inside `rope_parameters` only is not seen: the whole head rotates.
- scales: a DFlash drafter's logits are not scaled (`output_multiplier` / `final_logit_softcapping` are
  applied by `DFlash2DraftModel._transform_unary_logits` only, from `dflash_config`; `input_embedding_scale`
  is read nowhere). DFlash2: the selector walk starts from the verified anchor (`CandidateSelector.
  build_lattice`), as vLLM's.
- format: only the z-lab layout (`dflash_config`); no reader of `speculators_model_type`: a speculators
  checkpoint is refused.
- the draft window (`--speculative-draft-window-size W`, `dflash_worker_v2.py::_compute_compact_draft_seq_
  lens`): the last min(a, W) context rows, extended left to a page boundary (W .. W + page_size - 1 rows):
  `--draft-window` is that window with page size 1.

llama.cpp (ggml-org/llama.cpp `common/speculative.cpp` `common_speculative_impl_draft_dflash`, commit
001d906; `src/models/dflash.cpp` `llama_model_dflash`):
- causality: one setting for the whole draft context, `llama_set_causal_attn(ctx_dft, causal_attn)` with
  causal_attn false unless the GGUF's `dflash.attention.causal` is true: every layer bidirectional in the
  block. A checkpoint that declares `is_causal` or `dflash_config.causal` is refused: the GGUF key comes from
  the converter (convert_hf_to_gguf.py), which was not read.
- window: `attention.sliding_window` with its per-layer pattern, LLAMA_SWA_TYPE_STANDARD (`is_masked_swa`:
  masked iff q - k >= W): key k visible iff q - k < W; no limit to the right inside a bidirectional block.
- draft length: n_max clamped to block_size - 1 (DFlash and DFlash2); drafts read greedily at the mask slots
  1..n_max; `sample_from_anchor` (default true) is read but used by DSpark only at that commit, so it does not
  move a DFlash or DFlash2 draft; `--draft-p-min` (drafts stop at the first slot whose top-1 probability is
  below it) is not modelled: the run drafts every slot (p_min 0).
- scales: DFlash logits reach the sampler unscaled (argmax unchanged by a positive multiplier or a cap).
- refused: DFlash2 (its candidate lattice is built by a CPU-side selector not read), `partial_rotary_factor`
  (n_rot comes from the GGUF's rope.dimension_count, written by the converter), sampling (T > 0).

DeepSpec (deepseek-ai/DeepSpec at afdfa7c: `deepspec/eval/dspark/evaluator.py` `Qwen3DSparkEvaluator`,
`deepspec/eval/dspark/draft_ops.py` `forward_dspark_draft_block`, `deepspec/eval/base_evaluator.py`
`generate_decoding_sample`, `deepspec/modeling/dspark/qwen3/modeling.py` `Qwen3DSparkAttention`), the evaluator
its DFlash drafters were measured with:
- format: its own layout only (`eval.py` picks the evaluator by `architectures[0]`: Qwen3DSparkModel), read
  by formats/deepspec.py; any other format is refused under these rules.
- attention: every layer full and bidirectional in the block (`is_causal=False` on every call, no mask: the
  context cache holds rows before the anchor only); `build_draft_config` writes every layer full, so a
  sliding layer is refused.
- drafts: slot 0 drafts (`build_dspark_proposal` reads logits at slots 0..B-1): `sample_from_anchor`.
- final block: the full block every step, the output trimmed at max_new_tokens (`generate_decoding_sample`:
  `max_proposal_tokens` drafts whatever is left), as vLLM.
- scales: none (no `input_embedding_scale`, `output_multiplier`, softcap); RoPE: transformers'
  `Qwen3RotaryEmbedding` (the whole head).

A drafter whose slot 0 drafts (`sample_from_anchor`) is refused under vLLM's, SGLang's and llama.cpp's DFlash
rules: vLLM's `DFlashProposer.set_inputs_first_pass` samples the k slots after the anchor only, SGLang reads the
z-lab layout without the key, llama.cpp's DFlash draft reads mask slots 1..n_max.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .attention import AttentionConfig, LayerAttention

if TYPE_CHECKING:
    from .spec import DrafterSpec

ENGINE_RULES = ("sglang", "llamacpp", "deepspec")
SOURCES = {
    "sglang": "SGLang 0.5.23 srt/models/dflash.py (_get_dflash_attention_type, DFlashAttention.__init__), "
              "srt/speculative/dflash_utils.py (get_dflash_attention_sliding_window_size), "
              "srt/layers/attention/flashattention_backend.py (window_size)",
    "llamacpp": "llama.cpp common/speculative.cpp (common_speculative_impl_draft_dflash: causal_attn, n_max clamp, "
                "draft), src/models/dflash.cpp (llama_model_dflash: sliding window pattern)",
    "deepspec": "DeepSpec afdfa7c deepspec/eval/dspark/draft_ops.py (forward_dspark_draft_block: is_causal=False, "
                "build_dspark_proposal: slots 0..B-1), deepspec/eval/base_evaluator.py (generate_decoding_sample)",
}


def layers_under(config: AttentionConfig, semantics: str) -> tuple[tuple[LayerAttention, ...], str]:
    """Per-layer attention as SGLang or llama.cpp derives it (refusals: `refusal`)."""
    layers = []
    if semantics == "deepspec":  # refusal() refuses a sliding layer: every layer full and bidirectional
        return (tuple(LayerAttention("full", None, False, window_from="query") for _ in config.layer_types),
                "DeepSpec rules: every layer full and bidirectional in the block (is_causal=False on every call)")
    for kind in config.layer_types:
        sliding = kind == "sliding_attention"
        window = config.sliding_window if sliding else None
        if semantics == "sglang":
            causal = sliding if config.is_causal is None else bool(config.is_causal)
            layers.append(LayerAttention("sliding" if sliding else "full", window, causal, window_from="query"))
        else:
            layers.append(LayerAttention("sliding" if sliding else "full", window, False, window_from="query_left"))
    if semantics == "sglang":
        why = ("SGLang rules: " + (f"top-level is_causal={config.is_causal} on every layer" if config.is_causal
                                   is not None else "sliding layers causal, full layers bidirectional (no is_causal)")
               + ("; dflash_config.causal not read" if config.dflash_causal is not None else ""))
    else:
        why = "llama.cpp rules: every layer bidirectional in the block (causal_attn false); windows left of the query"
    return tuple(layers), why


def refusal(spec: "DrafterSpec", semantics: str, temperature: float = 0.0) -> str | None:
    """Why these rules cannot be reproduced for this checkpoint (None: they can)."""
    config = spec.attention_config
    if spec.sample_from_anchor and semantics in ANCHOR_DRAFT_REFUSALS:
        return ANCHOR_DRAFT_REFUSALS[semantics]
    if semantics == "deepspec":
        if spec.format != "deepspec":
            return ("DeepSpec's evaluator loads its own layout only (eval.py picks the evaluator by architectures[0]: "
                    "Qwen3DSparkModel); a DeepSpec-format copy is read under these rules")
        if config is not None and "sliding_attention" in config.layer_types:
            return "DeepSpec's build_draft_config writes every layer full_attention; a sliding layer is not its model"
        if spec.is_dflash2:
            return "DeepSpec has no DFlash2 drafter"
        return None
    if semantics == "sglang":
        if spec.format != "zlab":
            return ("SGLang 0.5.23 reads the z-lab layout only (srt/speculative/dflash_utils.py: dflash_config; no "
                    "reader of speculators_model_type): export the checkpoint in the z-lab format")
        if config is not None and config.sliding_window is None and "sliding_attention" in config.layer_types:
            return ("sliding layers without a window (use_sliding_window false or missing): SGLang raises 'DFLASH "
                    "sliding_attention layers require config.sliding_window'")
        if temperature > 0:
            return "SGLang's DFlash verification at temperature > 0 is not modelled (greedy only)"
        return None
    if semantics == "llamacpp":
        if spec.is_dflash2:
            return ("llama.cpp builds DFlash2's candidate lattice in a CPU-side selector that was not read "
                    "(common/speculative.cpp reads it from the nextn slot)")
        if config is not None and (config.is_causal is not None or config.dflash_causal is not None):
            declared = "is_causal" if config.is_causal is not None else "dflash_config.causal"
            return (f"the checkpoint declares {declared}; llama.cpp reads dflash.attention.causal from the GGUF, "
                    "which convert_hf_to_gguf.py writes (not read here): convert and check that key")
        factor = spec.rope.get("partial_rotary_factor")
        if (factor is not None and float(factor) != 1.0) or spec.rope.get("rope_dim") is not None:
            return ("partial rotary: llama.cpp rotates rope.dimension_count dims, written by convert_hf_to_gguf.py "
                    "(not read here)")
        if temperature > 0:
            return "llama.cpp drafts greedily and its verification at temperature > 0 is not modelled (greedy only)"
        return None
    return None


ANCHOR_DRAFT_REFUSALS = {  # a drafter whose slot 0 drafts (sample_from_anchor), under engines that never read it
    "vllm": ("slot 0 drafts (sample_from_anchor): vLLM's DFlash proposer samples the num_speculative_tokens slots "
             "after the anchor only (v1/spec_decode/dflash.py DFlashProposer.set_inputs_first_pass)"),
    "sglang": ("slot 0 drafts (sample_from_anchor): SGLang's DFlash reads the z-lab layout, which has no such key, and "
               "drafts the mask slots after the anchor (srt/models/dflash.py)"),
    "llamacpp": ("slot 0 drafts (sample_from_anchor): llama.cpp's DFlash draft reads mask slots 1..n_max "
                 "(common/speculative.cpp common_speculative_impl_draft_dflash; the key moves DSpark only)"),
}


def sglang_rotary_dim(rope: dict, head_dim: int, declared_top_level: bool) -> int:
    """SGLang's rotary dims: `rope_dim` if given, else int(head_dim x f) for a top-level
    partial_rotary_factor f (transformers 5.19 keeps it as an attribute), else the whole head."""
    if rope.get("rope_dim") is not None:
        return int(rope["rope_dim"])
    factor = rope.get("partial_rotary_factor")
    if declared_top_level and factor is not None and float(factor) < 1.0:
        return int(head_dim * float(factor))
    return head_dim


NOTES = {
    "sglang": "SGLang serving: no logit scales for a DFlash drafter; --draft-window W is SGLang's "
              "--speculative-draft-window-size with page size 1 (a page size P keeps up to P - 1 more rows)",
    "llamacpp": "llama.cpp serving: drafts of n_max = B - 1 greedy tokens, --draft-p-min not modelled (0); the GGUF "
                "conversion is assumed to carry taps, window and block size unchanged",
    "deepspec": "DeepSpec's evaluator: the full block every step (trimmed at max_new_tokens), slot 0 drafting",
}
