"""How each engine reads a checkpoint, before anything runs: `inspect --engines`, and the rules `doctor --engines`
replays (one home for both: doctor/commands/engines.py imports `RULES`, `rule_values`, `describe_rule`,
`engine_specs` and `switched` from here).

One table: a column per engine (z-lab's `dflash` package, speculators' trainer, vLLM, SGLang, llama.cpp, and
DeepSpec's evaluator), a row per reading, each cell the value that engine will use for this checkpoint and the
file and function in its code that decides it; a cell that differs from the checkpoint's own rules (its format's
default rule set, or the `--semantics` given) is marked. The rule rows (in-block causality, window, RoPE,
logit scales, final block) are exactly `doctor --engines`'s: its `differs` list is `rule_values` compared here.

Where the code that decides a reading was not read, the cell says so (`sourced` false) instead of guessing:
llama.cpp's converter (convert_hf_to_gguf.py: which tap ids, mask id, fc tensor type it writes) and the places
noted per cell. Versions: vLLM's DFlash files at main (qwen3_dflash.py, v1/spec_decode/dflash.py,
v1/worker/gpu/spec_decode/eagle/eagle3_utils.py; core/semantics.py's rules at 0.33.0), SGLang's
srt/speculative/dflash_utils.py at main (its rules: engine_rules.py, 0.5.23), dflash 0.1.0, speculators 0.9.0,
DeepSpec afdfa7c.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from .semantics import (
    ROTARY_SOURCE,
    RULE_SOURCES,
    SCALE_SOURCE,
    SEMANTICS,
    VLLM_SERVING_RULES,
    apply_semantics,
    rotary_dim,
    shorter_final_block,
)
from .spec import DrafterSpec

ENGINES = SEMANTICS  # zlab, speculators, vllm, sglang, llamacpp, deepspec
NAMES = {"zlab": "z-lab", "speculators": "speculators", "vllm": "vLLM 0.33", "sglang": "SGLang 0.5.23",
         "llamacpp": "llama.cpp", "deepspec": "DeepSpec"}
RULES = ("in-block causality", "window", "logit scales", "RoPE", "final block")


def _rope_rules(spec: DrafterSpec) -> str:
    return spec.rotary_semantics or spec.semantics


def rule_values(spec: DrafterSpec) -> dict[str, Any]:
    """What each rule of RULES sets for this spec (equal values: the rule does not differ)."""
    return {"in-block causality": tuple(x.causal_in_block for x in spec.layers),
            "window": tuple((x.window, x.window_from if x.window is not None else None) for x in spec.layers),
            "logit scales": (spec.embedding_scale, spec.output_multiplier, spec.logit_softcap),
            "RoPE": rotary_dim(spec.rope, spec.head_dim, _rope_rules(spec), spec.partial_rotary_top_level),
            "final block": shorter_final_block(spec.semantics, True)}


def switched(base: DrafterSpec, other: DrafterSpec, rule: str) -> DrafterSpec:
    """`base` with only `rule` taken from `other`."""
    if rule == "in-block causality":
        return replace(base, layers=tuple(replace(b, causal_in_block=o.causal_in_block)
                                          for b, o in zip(base.layers, other.layers)))
    if rule == "window":
        return replace(base, layers=tuple(replace(b, window=o.window, window_from=o.window_from)
                                          for b, o in zip(base.layers, other.layers)))
    if rule == "logit scales":
        return replace(base, embedding_scale=other.embedding_scale, output_multiplier=other.output_multiplier,
                       logit_softcap=other.logit_softcap)
    if rule == "RoPE":
        return replace(base, rotary_semantics=_rope_rules(other))
    if rule == "final block":  # the final-block rule follows `semantics`; the rotary stays base's
        return replace(base, semantics=other.semantics, rotary_semantics=_rope_rules(base))
    raise ValueError(f"unknown rule {rule!r}")


def describe_rule(spec: DrafterSpec, rule: str) -> str:
    """One phrase: what this engine's reading sets for `rule`."""
    values = rule_values(spec)[rule]
    if rule == "in-block causality":
        return spec.causality_source
    if rule == "window":
        parts = [f"layer {i}: " + ("no window" if w is None else f"W={w} from the " + origin.replace("_", " "))
                 for i, (w, origin) in enumerate(values)]
        return "; ".join(parts)
    if rule == "logit scales":
        return f"embedding x {values[0]:g}, logits x {values[1]:g}, softcap {values[2]}"
    if rule == "RoPE":
        return f"rotates {values} of {spec.head_dim} dims"
    return "shorter final block (z-lab)" if values else "full blocks up to the length cap (vLLM, DeepSpec)"


def engine_specs(base: DrafterSpec) -> dict[str, DrafterSpec | str]:
    """Engine -> its reading of the checkpoint, or the reason it is refused."""
    from .errors import InputError

    out: dict[str, DrafterSpec | str] = {}
    for engine in ENGINES:
        try:
            out[engine] = apply_semantics(base, engine, f"doctor --engines: {NAMES[engine]}'s rules")
        except InputError as exc:
            out[engine] = exc.problem
    return out


# ---------------------------------------------------------------------------------------------------
# the readings table (`inspect --engines`)

READINGS = ("layout", "tap numbering", "in-block causality", "window and paging", "block size and clamp",
            "sample_from_anchor", "mask-token row", "RoPE", "verifier norm", "fc dtype", "logit scales",
            "final block")
# the formats each engine's code loads (engine_rules.py, formats/*.py): another layout is scored by doctor
# --engines under that engine's rules as if converted, and its layout cells say so
LAYOUTS = {"zlab": ("zlab",), "speculators": ("speculators",), "vllm": ("zlab", "speculators"), "sglang": ("zlab",),
           "llamacpp": ("zlab",), "deepspec": ("deepspec",)}
LAYOUT_SOURCES = {
    "zlab": "dflash 0.1.0 dflash/model.py (DFlashDraftModel: dflash_config)",
    "speculators": "speculators 0.9.0 models/dflash/config.py (DFlashSpeculatorConfig)",
    "vllm": "vLLM config/speculative.py (method dflash), transformers_utils/configs/speculators/algos.py (update_dflash)",
    "sglang": "SGLang srt/speculative/dflash_utils.py (parse_dflash_draft_config: dflash_config, then the top level)",
    "llamacpp": "llama.cpp convert_hf_to_gguf.py (not read: the GGUF it writes is what llama.cpp loads)",
    "deepspec": "DeepSpec eval.py (EVALUATORS by architectures[0]), modeling/dspark/qwen3/modeling.py (Qwen3DSparkModel)",
}
RULE_READINGS = {"in-block causality": "in-block causality", "window and paging": "window", "RoPE": "RoPE",
                 "logit scales": "logit scales", "final block": "final block"}
# where a rule's cell has a more precise source than the engine's attention functions (RULE_SOURCES)
RULE_CELL_SOURCES = {
    ("zlab", "RoPE"): ROTARY_SOURCE, ("speculators", "RoPE"): ROTARY_SOURCE, ("vllm", "RoPE"): ROTARY_SOURCE,
    ("sglang", "RoPE"): "SGLang 0.5.23 srt/models/dflash.py (DFlashAttention.__init__: rope_dim, partial_rotary_factor)",
    ("zlab", "logit scales"): SCALE_SOURCE,
    ("zlab", "final block"): "dflash 0.1.0 dflash/model.py (dflash_generate: verify_size = min(block_size, left))",
    ("vllm", "final block"): VLLM_SERVING_RULES["final block"],
    ("deepspec", "final block"): "DeepSpec eval/base_evaluator.py (generate_decoding_sample: max_proposal_tokens "
                                 "every step, output trimmed)",
}


def _cell(value: str, source: str, differs: bool = False, sourced: bool = True) -> dict[str, Any]:
    return {"value": value, "source": source, "differs": bool(differs), "sourced": sourced}


def _taps(taps) -> str:
    return f"output of layers {list(taps)}"


def _tap_cell(engine: str, spec: DrafterSpec, config: dict[str, Any]) -> dict[str, Any]:
    taps = tuple(spec.taps)
    if engine == "zlab":
        return _cell(f"{_taps(taps)} (target_layer_ids t -> HF hidden_states[t + 1])",
                     "dflash 0.1.0 dflash/model.py (extract_context_feature: offset 1)")
    if engine == "speculators":
        return _cell(f"{_taps(taps)} (aux_hidden_state_layer_ids {list(spec.speculators_taps)}: residual after k layers)",
                     "speculators 0.9.0 models/dflash/core.py (aux_hidden_state_layer_ids, vLLM capture numbering)")
    if engine == "vllm":
        source = ("vLLM v1/worker/gpu/spec_decode/eagle/eagle3_utils.py (get_eagle3_aux_layers_from_config: "
                  "eagle_aux_hidden_state_layer_ids as given, else dflash_config.target_layer_ids + 1, else "
                  "target_layer_ids + 1)")
        eagle = config.get("eagle_aux_hidden_state_layer_ids")
        if isinstance(eagle, list) and eagle:
            used = tuple(int(k) - 1 for k in eagle)
            return _cell(f"{_taps(used)} (eagle_aux_hidden_state_layer_ids {eagle} win over the DFlash ids)", source,
                         differs=used != taps)
        return _cell(f"{_taps(taps)} (captured after t + 1 layers)", source)
    if engine == "sglang":
        return _cell(f"{_taps(taps)} (dflash_config.target_layer_ids, else the top level; captured before layer t + 1)",
                     "SGLang srt/speculative/dflash_utils.py (parse_dflash_draft_config, build_target_layer_ids)")
    if engine == "llamacpp":
        return _cell(f"assumed {_taps(taps)}: the GGUF's dflash.target_layers (t + 1 in a converted Qwen3-8B "
                     "drafter's metadata, ggml-org/llama.cpp #25792)", "not read: convert_hf_to_gguf.py and the "
                     "extraction in llama.cpp's target graph", sourced=False)
    return _cell(f"{_taps(taps)} (hidden_states[id + 1]; the final layer refused)",
                 "DeepSpec modeling/dspark/common.py (extract_context_feature), eval/base_evaluator.py "
                 "(assert_no_final_target_layer)")


def _levels(config: dict[str, Any]) -> tuple[int | None, int | None]:
    """(dflash_config.block_size, top-level block_size) as the config holds them."""
    def num(value):
        return value if isinstance(value, int) and not isinstance(value, bool) else None
    nested = (config.get("dflash_config") or {}) if isinstance(config.get("dflash_config"), dict) else {}
    return num(nested.get("block_size")), num(config.get("block_size"))


def _block_cell(engine: str, spec: DrafterSpec, config: dict[str, Any]) -> dict[str, Any]:
    own = spec.network_block_size
    nested, top = _levels(config)
    if engine == "zlab":
        used = nested if nested is not None else top
        return _cell(f"{used}: dflash_config.block_size, else the top level; near the cap min(B, tokens left); no "
                     "clamp of a draft length", "dflash 0.1.0 dflash/model.py (DFlashDraftModel.__init__: "
                     "_draft_value block_size; dflash_generate: verify_size)", differs=used != own)
    if engine == "speculators":
        return _cell(f"{top}: the top-level block_size", "speculators 0.9.0 models/dflash/config.py (block_size)",
                     differs=top is not None and top != own)
    if engine == "vllm":
        return _cell("not read: a block of 1 + num_speculative_tokens (the server's flag), no clamp to the trained "
                     "block (vllm-project/vllm #41834)", "vLLM v1/spec_decode/dflash.py (DFlashProposer."
                     "set_inputs_first_pass: num_query_per_req = 1 + num_speculative_tokens)", differs=True)
    if engine == "sglang":
        used = nested if nested is not None else top
        return _cell(f"{used}: dflash_config.block_size, else the top level; how --speculative-num-draft-tokens "
                     "meets it was not read", "SGLang srt/speculative/dflash_utils.py (parse_dflash_draft_config, "
                     "DFlashDraftConfig.resolve_block_size)", differs=used is not None and used != own, sourced=False)
    if engine == "llamacpp":
        return _cell(f"{own} (the GGUF's dflash.block_size); n_max clamped to block_size - 1",
                     "llama.cpp common/speculative.cpp (common_speculative_impl_draft_dflash: n_max clamp); the "
                     "converter's block_size level not read")
    return _cell(f"{top}: config.block_size, every slot drafting (max_proposal_tokens = block_size)",
                 "DeepSpec modeling/dspark/qwen3/modeling.py (Qwen3DSparkModel.__init__), eval/dspark/evaluator.py "
                 "(max_proposal_tokens)", differs=top is not None and top != own)


def _anchor_cell(engine: str, spec: DrafterSpec) -> dict[str, Any]:
    drafts = spec.sample_from_anchor
    if engine == "speculators":
        return _cell(f"{'true' if drafts else 'false'} (config key sample_from_anchor, default false)",
                     "speculators 0.9.0 models/dflash/config.py (sample_from_anchor), core.py (targets at the "
                     "anchored block indices)")
    if engine == "deepspec":
        return _cell("true: slot 0 drafts (slots 0..B-1 propose)", "DeepSpec eval/dspark/draft_ops.py "
                     "(build_dspark_proposal)", differs=not drafts)
    value, source = {
        "zlab": ("not read: slot 0 is the anchor, slots 1..B-1 draft", "dflash 0.1.0 dflash/model.py "
                                                                      "(dflash_generate: block_output_ids[:, 1:])"),
        "vllm": ("not read: the k slots after the anchor draft", "vLLM v1/spec_decode/dflash.py "
                                                                 "(DFlashProposer.set_inputs_first_pass)"),
        "sglang": ("not read for DFlash (only its Nemotron layout test reads it)",
                   "SGLang srt/speculative/dflash_utils.py (is_nemotron_35_draft_config)"),
        "llamacpp": ("read (default true) but used by DSpark only: DFlash drafts mask slots 1..n_max",
                     "llama.cpp common/speculative.cpp (common_speculative_impl_draft_dflash)"),
    }[engine]
    return _cell(value, source, differs=drafts)


def _mask_cell(engine: str, spec: DrafterSpec, mask_override: bool) -> dict[str, Any]:
    own = spec.embedding_source
    row = f"row {spec.mask_token_id}"
    if engine == "zlab":
        return _cell(f"the target's table, {row} (dflash_config.mask_token_id)", "dflash 0.1.0 dflash/model.py "
                     "(dflash_generate: the target's embed_tokens)", differs=own != "target")
    if engine in ("speculators", "deepspec"):
        source = ("speculators 0.9.0 models/dflash/core.py (embed_tokens: a frozen copy of the verifier's)"
                  if engine == "speculators" else "DeepSpec modeling/dspark/common.py (create_noise_embed with the "
                  "checkpoint's embed_tokens)")
        return _cell(f"the checkpoint's table copy, {row}", source, differs=own != "checkpoint")
    if engine == "vllm":
        if mask_override:
            return _cell(f"mask_embedding.pt beside the checkpoint replaces {row}", "vLLM model_executor/models/"
                         "qwen3_dflash.py (DFlashQwen3ForCausalLM._read_mask_embedding)", differs=True)
        table = "the checkpoint's table" if own == "checkpoint" else "the target's table"
        return _cell(f"{table}, {row} (a mask_embedding.pt would replace it)", "vLLM model_executor/models/"
                     "qwen3_dflash.py (load_weights: embed_tokens when shipped; _read_mask_embedding)")
    if engine == "sglang":
        return _cell(f"{row} (dflash_config.mask_token_id, else the top level, else the token '<|MASK|>'); which "
                     "table when the checkpoint ships one was not read", "SGLang srt/speculative/dflash_utils.py "
                     "(parse_dflash_draft_config, DEFAULT_DFLASH_MASK_TOKEN)", sourced=False)
    return _cell(f"assumed the target's table, {row} (the GGUF's dflash.mask_token_id)",
                 "not read: convert_hf_to_gguf.py (the key is in converted drafters' metadata, llama.cpp #22105)",
                 sourced=False)


def _norm_cell(engine: str, verifier_norm: dict[str, Any] | None) -> dict[str, Any]:
    if engine == "speculators":
        if verifier_norm is None:
            return _cell("the teacher's final norm: its convention depends on the target (give --target)",
                         "speculators 0.9.0 models/utils.py (resolve_verifier_norm_class)", sourced=True)
        return _cell(verifier_norm["rule"], "speculators 0.9.0 models/utils.py (GEMMA_STYLE_FINAL_NORM_MODEL_TYPES, "
                     "resolve_verifier_norm_class); commands/doctor_norm.py", differs=bool(verifier_norm["applies"]))
    where = {"zlab": "dflash 0.1.0 dflash/model.py (dflash_generate: the target's own logits verify)",
             "vllm": "vLLM: the target model's own forward verifies (v1/sample/rejection_sampler.py)",
             "sglang": "SGLang: the target model's own forward verifies (srt/speculative/dflash_utils.py verify)",
             "llamacpp": "llama.cpp: the target's own logits verify (common/speculative.cpp)",
             "deepspec": "DeepSpec eval/base_evaluator.py (verify_draft_tokens: the target's own logits)"}[engine]
    return _cell("the target's own final norm (verification by its own logits)", where)


def _fc_cell(engine: str) -> dict[str, Any]:
    value, source, sourced = {
        "zlab": ("the drafter's load dtype (bf16 in its benchmark)", "dflash 0.1.0 dflash/benchmark.py "
                 "(dtype=torch.bfloat16)", True),
        "speculators": ("the training precision (not a serving reading)", "speculators 0.9.0: its trainer's "
                        "precision setting (not read further)", False),
        "vllm": ("the served model dtype (--dtype: fp16 when served in half precision)", "vLLM model_executor/models/"
                 "qwen3_dflash.py (DFlashQwen3Model.__init__: fc = ReplicatedLinear(params_dtype=model dtype))", True),
        "sglang": ("not read", "SGLang srt/models/dflash.py (its fc's dtype not read)", False),
        "llamacpp": ("the GGUF's fc.weight type (convert_hf_to_gguf.py --outtype)", "not read: the converter and "
                     "ggml's matmul precision for it", False),
        "deepspec": ("bfloat16", "DeepSpec eval/dspark/evaluator.py (Qwen3DSparkEvaluator.build_models: "
                     "from_pretrained(dtype=torch.bfloat16))", True),
    }[engine]
    return _cell(value, source, sourced=sourced)


def engine_readings(spec: DrafterSpec, config: dict[str, Any], *, verifier_norm: dict[str, Any] | None = None,
                    mask_override: bool = False) -> dict[str, Any]:
    """The table (module docstring): {"base", "engines" [{engine, name, refused}], "rows" [{reading, cells:
    {engine: {value, source, differs, sourced}}}], "unsourced" [(engine, reading)]}. `verifier_norm`:
    doctor_norm.norm_case for a speculators checkpoint; `mask_override`: a mask_embedding.pt beside it."""
    specs = engine_specs(spec)
    own = rule_values(spec)
    engines = [{"engine": e, "name": NAMES[e], "refused": s if isinstance(s, str) else None} for e, s in specs.items()]
    rows: list[dict[str, Any]] = []
    for reading in READINGS:
        cells: dict[str, dict[str, Any]] = {}
        for engine, engine_spec in specs.items():
            if reading == "layout":
                loads = spec.format in LAYOUTS[engine]
                refusal = engine_spec if isinstance(engine_spec, str) else None
                value = ((f"reads the {spec.format} layout" if loads else f"does not load the {spec.format} layout "
                          "(doctor --engines scores its rules as if converted)")
                         + (f"; refused: {refusal}" if refusal else ""))
                cells[engine] = _cell(value, LAYOUT_SOURCES[engine], differs=not loads or refusal is not None,
                                      sourced=engine != "llamacpp")
            elif isinstance(engine_spec, str):
                cells[engine] = {"value": "refused (first row)", "source": "", "differs": False, "sourced": True,
                                 "refused": True}
            elif reading in RULE_READINGS:
                rule = RULE_READINGS[reading]
                value = describe_rule(engine_spec, rule)
                if reading == "window and paging" and engine == "sglang":
                    value += ("; paged: --speculative-draft-window-size keeps W .. W + page_size - 1 rows "
                              "(dflash_worker_v2.py _compute_compact_draft_seq_lens)")
                cells[engine] = _cell(value, RULE_CELL_SOURCES.get((engine, rule), RULE_SOURCES.get(engine, engine)),
                                      differs=rule_values(engine_spec)[rule] != own[rule])
            elif reading == "tap numbering":
                cells[engine] = _tap_cell(engine, spec, config)
            elif reading == "block size and clamp":
                cells[engine] = _block_cell(engine, spec, config)
            elif reading == "sample_from_anchor":
                cells[engine] = _anchor_cell(engine, spec)
            elif reading == "mask-token row":
                cells[engine] = _mask_cell(engine, spec, mask_override)
            elif reading == "verifier norm":
                cells[engine] = _norm_cell(engine, verifier_norm)
            else:
                cells[engine] = _fc_cell(engine)
        rows.append({"reading": reading, "cells": cells})
    unsourced = [(e, r["reading"]) for r in rows for e, c in r["cells"].items() if not c["sourced"]]
    return {"base": {"format": spec.format, "semantics": spec.semantics, "source": spec.semantics_source,
                     "path": spec.path},
            "engines": engines, "rows": rows, "unsourced": unsourced}
