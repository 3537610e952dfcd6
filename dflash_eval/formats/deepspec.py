"""DeepSpec's DFlash drafters (`deepseek-ai/dflash_qwen3_{4b,8b,14b}_block7`): the third checkpoint format.

What the format is, read in the program that writes and evaluates it (deepseek-ai/DeepSpec at afdfa7c):
- `deepspec/modeling/dspark/qwen3/config.py` `build_draft_config`: a deep copy of the *target's* Qwen3 config
  (`model_type` qwen3, its RoPE, sizes and ids) with `architectures = ["Qwen3DSparkModel"]`,
  `num_target_layers`, `num_hidden_layers` (the drafter's), `block_size`, `tie_word_embeddings = false`, every
  layer `full_attention`, `mask_token_id`, `target_layer_ids` (checked by `common.validate_target_layer_ids`:
  strictly increasing, each -1 (the embedding output) or 0..L-1), `num_anchors` (training), `enable_confidence_
  head`, `markov_rank` (and `markov_head_type`, `confidence_head_with_markov` when those heads exist: DSpark).
  The DFlash configs (`config/dflash/*.py`) disable both heads: markov_rank 0, confidence_head_alpha 0.
- `deepspec/modeling/dspark/qwen3/modeling.py` `Qwen3DSparkModel`: `embed_tokens` and `lm_head` (frozen copies
  of the target's, `initialize_embeddings_and_head`), `layers`, `norm`, `fc`, `hidden_norm`; saved by
  `save_pretrained` (`trainer/ckpt_manager.py` `_save_model_checkpoint`) under those names, no prefix.
  `_forward_backbone`: ctx = hidden_norm(fc(taps)), the z-lab body; the training mask (`common.
  create_dspark_attention_mask`) shows context rows p < anchor and the whole own block (bidirectional).
- taps: `common.extract_context_feature` reads HF `hidden_states[layer_id + 1]`: z-lab numbering (output of
  layer t). The evaluator refuses a tap on the final layer (`base_evaluator.assert_no_final_target_layer`: HF's
  last entry is post-norm, the training cache stored the raw output), and so does this reader.
- drafts: block position j predicts anchor + j + 1 (`forward`: labels at anchor + 1..anchor + B;
  `eval/dspark/draft_ops.build_dspark_proposal`: B proposals from slots 0..B-1): slot 0 drafts. Read as
  `DrafterSpec.sample_from_anchor` with `block_size` = B + 1 (core/spec.py).

optimum-intel #1981 (OpenVINO export of these checkpoints) reads the same layout and notes the shifted
candidate positions. Everything else in the config is the target's Qwen3 config and is read as a z-lab body
(typed like transformers' `Qwen3Config`). This module checks the DeepSpec keys and says what each means;
formats/checkpoints.py builds the spec.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..core.errors import InputError

ARCHITECTURE = "Qwen3DSparkModel"
OTHER_ARCHITECTURES = {"Gemma4DSparkModel": "DeepSpec's Gemma 4 drafter (dflash-eval implements the Qwen3 body)",
                       "Qwen3Eagle3Model": "DeepSpec's EAGLE-3 drafter", "Gemma4Eagle3Model": "DeepSpec's EAGLE-3 drafter"}
# keys build_draft_config adds to the target's config; every other key is the target's Qwen3 config
FORMAT_KEYS = ("num_target_layers", "block_size", "mask_token_id", "target_layer_ids", "num_anchors",
               "enable_confidence_head", "markov_rank", "markov_head_type", "confidence_head_with_markov")
# keys of the other formats: present in a DeepSpec config they are ambiguous, refused by name
FOREIGN_KEYS = ("dflash_config", "speculators_model_type", "transformer_layer_config", "aux_hidden_state_layer_ids",
                "sample_from_anchor", "is_causal", "input_embedding_scale", "output_multiplier",
                "final_logit_softcapping")
SOURCE = ("DeepSpec afdfa7c deepspec/modeling/dspark/qwen3/{config.py (build_draft_config), modeling.py "
          "(Qwen3DSparkModel)}, deepspec/eval/dspark/draft_ops.py (build_dspark_proposal)")
NOTE = ("DeepSpec DFlash: slot 0 drafts (position j of a block predicts anchor + j + 1; build_dspark_proposal), so "
        "a block of {b} runs {b} network slots and drafts {b} tokens (block size B = {b1} as read here); embedding "
        "and lm_head are the checkpoint's frozen copies of the target's")


def is_deepspec(config: dict[str, Any]) -> bool:
    archs = config.get("architectures")  # any JSON: a name that is not a string is no DeepSpec model's
    return isinstance(archs, list) and any(isinstance(a, str) and (a == ARCHITECTURE or a in OTHER_ARCHITECTURES)
                                           for a in archs)


def checked_keys(config: dict[str, Any], path: Path) -> dict[str, Any]:  # noqa: C901 (past the ceiling before it was set; split by idea when next touched)
    """The DeepSpec keys, each honoured or refused by name: {"taps", "num_target_layers", "block_size",
    "mask_token_id", "notes"}. Refused: another DeepSpec model (DSpark's heads, Gemma 4, EAGLE-3), a tap on the
    embedding output (-1) or on the final layer, taps not strictly increasing, a sliding layer, tied tables,
    another format's keys."""
    archs = config.get("architectures") or []
    for arch in archs:
        if isinstance(arch, str) and arch in OTHER_ARCHITECTURES:
            raise InputError(path, f"config key 'architectures'={arch!r} ({OTHER_ARCHITECTURES[arch]}) is not supported "
                                   "by dflash-eval")
    if archs != [ARCHITECTURE]:
        raise InputError(path, f"config key 'architectures'={archs!r}: a DeepSpec DFlash drafter is [{ARCHITECTURE!r}]")
    for key in FOREIGN_KEYS:
        if key in config:
            raise InputError(path, f"config key {key!r} in a DeepSpec ({ARCHITECTURE}) config: not part of the format "
                                   "(DeepSpec's code reads no such key); remove it or convert the checkpoint")
    if config.get("model_type", "qwen3") != "qwen3":
        raise InputError(path, f"config key 'model_type'={config['model_type']!r}: DeepSpec's Qwen3DSparkModel is "
                               "built on the Qwen3 config")
    markov = config.get("markov_rank", 0)
    if isinstance(markov, bool) or not isinstance(markov, int) or markov < 0:
        raise InputError(path, f"config key 'markov_rank'={markov!r} is not an integer >= 0")
    if markov > 0 or "markov_head_type" in config:
        key = "markov_rank" if markov > 0 else "markov_head_type"
        raise InputError(path, f"config key {key!r}={config[key]!r} (DSpark's Markov head: a left-to-right bias on the "
                               "block's logits) is not supported by dflash-eval; DeepSpec's DFlash drafters have "
                               "markov_rank 0")
    confidence = config.get("enable_confidence_head", False)
    if not isinstance(confidence, bool):
        raise InputError(path, f"config key 'enable_confidence_head'={confidence!r} is not true/false")
    if confidence or "confidence_head_with_markov" in config:
        key = "enable_confidence_head" if confidence else "confidence_head_with_markov"
        raise InputError(path, f"config key {key!r}={config[key]!r} (DSpark's confidence head: drafts cut at the first "
                               "slot below --confidence-threshold) is not supported by dflash-eval")
    if config.get("tie_word_embeddings"):
        raise InputError(path, "config key 'tie_word_embeddings'=true: DeepSpec's build_draft_config writes false "
                               "(the checkpoint carries its own lm_head); a tied table is not its model")
    types = config.get("layer_types")
    if isinstance(types, list) and any(t != "full_attention" for t in types):
        raise InputError(path, f"config key 'layer_types' has {next(t for t in types if t != 'full_attention')!r}: "
                               "DeepSpec's build_draft_config writes every layer full_attention, and its mask reads "
                               "no window")
    missing = [k for k in ("num_target_layers", "block_size", "mask_token_id", "target_layer_ids") if config.get(k) is None]
    if missing:
        raise InputError(path, f"missing config key {missing[0]!r} (DeepSpec's Qwen3DSparkModel requires it)")
    values = {}
    for key, low in (("num_target_layers", 1), ("block_size", 1), ("mask_token_id", 0)):
        value = config[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise InputError(path, f"config key {key!r}={value!r} is not an integer >= {low}")
        values[key] = value
    layers = values["num_target_layers"]
    taps = config["target_layer_ids"]
    if not isinstance(taps, list) or not taps or not all(isinstance(t, int) and not isinstance(t, bool) for t in taps):
        raise InputError(path, f"config key 'target_layer_ids'={taps!r} is not a non-empty list of integers")
    if any(b <= a for a, b in zip(taps, taps[1:])):
        raise InputError(path, f"config key 'target_layer_ids'={taps!r} is not strictly increasing (DeepSpec's "
                               "validate_target_layer_ids)")
    if -1 in taps:
        raise InputError(path, "config key 'target_layer_ids' holds -1 (DeepSpec: the embedding output, HF "
                               "hidden_states[0]), which dflash-eval does not capture")
    bad = [t for t in taps if not 0 <= t < layers]
    if bad:
        raise InputError(path, f"config key 'target_layer_ids' holds {bad[0]}, outside 0..{layers - 1} for "
                               f"num_target_layers={layers} (DeepSpec's validate_target_layer_ids)")
    if layers - 1 in taps:
        raise InputError(path, f"config key 'target_layer_ids' holds the final target layer {layers - 1}: DeepSpec's "
                               "evaluator refuses it (assert_no_final_target_layer: HF output_hidden_states holds the "
                               "post-norm state there, the training cache the raw layer output)")
    notes = [NOTE.format(b=values["block_size"], b1=values["block_size"] + 1)]
    if config.get("num_anchors") is not None:
        notes.append(f"num_anchors={config['num_anchors']!r}: anchors sampled per training sequence, read by training only")
    return {"taps": tuple(taps), **values, "notes": notes}
