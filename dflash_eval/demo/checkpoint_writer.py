"""Write DFlash checkpoints in either format (for the fixture trainer, the demo and the tests).

The writer is the exact inverse of `checkpoints.read_spec`: a spec written in one format and read back
gives the same spec (up to `format`, `path` and the embedding/lm_head ownership each format implies), and
the same body weights in both formats must give identical drafts. Taps are written in each format's own
numbering: z-lab `target_layer_ids = t`, speculators `aux_hidden_state_layer_ids = t + 1`.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from ..core.attention import AttentionConfig, Scales
from ..core.semantics import FORMAT_SEMANTICS, apply_semantics
from ..core.spec import DrafterSpec
from ..formats.validation import TargetInfo


def design_spec(
    target: TargetInfo,
    *,
    taps: list[int] | None = None,
    block_size: int = 8,
    mask_token_id: int,
    num_layers: int = 2,
    num_attention_heads: int = 4,
    num_key_value_heads: int = 2,
    head_dim: int = 16,
    intermediate_size: int | None = None,
    sliding_window: int | None = None,
    sliding_layers: int = 0,
    rope_theta: float = 1_000_000.0,
    draft_vocab_size: int | None = None,
    fmt: str = "speculators",
    is_causal: bool | None = None,
    sliding_window_non_causal: bool | None = None,
    scales: Scales | None = None,
) -> DrafterSpec:
    """A new drafter for `target` (z-lab-style defaults: taps spread from 1 to L-3).

    Its layers follow the rules of `fmt` (semantics.py): the first `sliding_layers` layers are sliding,
    with a window measured from the anchor (speculators) or from the query (z-lab); `is_causal` (z-lab)
    and `sliding_window_non_causal` (speculators) are written as those keys."""
    if taps is None:
        n, last = min(5, max(1, target.num_layers - 2)), max(1, target.num_layers - 3)
        taps = sorted({round(1 + i * (last - 1) / max(1, n - 1)) for i in range(n)})
    attention = AttentionConfig(
        layer_types=tuple("sliding_attention" if i < sliding_layers else "full_attention" for i in range(num_layers)),
        sliding_window=sliding_window if sliding_layers else None,
        declared_window=sliding_window if sliding_layers else None,
        use_sliding_window=bool(sliding_layers), is_causal=is_causal,
        sliding_window_non_causal=sliding_window_non_causal, format=fmt)
    if sliding_layers and sliding_window is None:
        raise ValueError("sliding_layers needs a sliding_window")
    spec = DrafterSpec(
        format=fmt, path="", num_layers=num_layers, hidden_size=target.hidden_size,
        target_hidden_size=target.hidden_size, intermediate_size=intermediate_size or 3 * target.hidden_size,
        num_attention_heads=num_attention_heads, num_key_value_heads=num_key_value_heads, head_dim=head_dim,
        rms_norm_eps=1e-6, attention_bias=False, vocab_size=target.vocab_size,
        draft_vocab_size=draft_vocab_size or target.vocab_size, taps=tuple(taps),
        num_target_layers=target.num_layers, block_size=block_size, mask_token_id=mask_token_id,
        layers=(), causality_source="designed", rope={"rope_type": "default", "rope_theta": rope_theta},
        max_position_embeddings=32768, embedding_source="target", lm_head_source="target",
        has_d2t=draft_vocab_size is not None and draft_vocab_size != target.vocab_size,
        attention_config=attention, scales=scales or Scales(),
    )
    return apply_semantics(spec, FORMAT_SEMANTICS[fmt], f"format default ({fmt} checkpoint)")


def _attention(spec: DrafterSpec) -> AttentionConfig:
    if spec.attention_config is None:
        raise ValueError("spec has no attention config to write (build it with design_spec or read_spec)")
    return spec.attention_config


def _body_config(spec: DrafterSpec) -> dict[str, Any]:
    attention = _attention(spec)
    body = {
        "hidden_size": spec.hidden_size, "intermediate_size": spec.intermediate_size,
        "num_hidden_layers": spec.num_layers, "num_attention_heads": spec.num_attention_heads,
        "num_key_value_heads": spec.num_key_value_heads, "head_dim": spec.head_dim,
        "rms_norm_eps": spec.rms_norm_eps, "attention_bias": spec.attention_bias, "hidden_act": "silu",
        "vocab_size": spec.vocab_size, "max_position_embeddings": spec.max_position_embeddings,
        "rope_parameters": dict(spec.rope),
        "layer_types": list(attention.layer_types),
        "use_sliding_window": bool(attention.use_sliding_window),
        "sliding_window": attention.declared_window,
        "tie_word_embeddings": False,
    }
    if attention.is_causal is not None:
        body["is_causal"] = attention.is_causal
    for key in ("input_embedding_scale", "output_multiplier", "final_logit_softcapping"):
        if getattr(spec.scales, key) is not None:
            body[key] = getattr(spec.scales, key)
    return body


def zlab_config(spec: DrafterSpec) -> dict[str, Any]:
    if spec.sample_from_anchor:
        raise ValueError("the z-lab layout has no key for a drafter whose slot 0 drafts (sample_from_anchor)")
    return {"architectures": ["DFlashDraftModel"], "model_type": "qwen3", **_body_config(spec),
            "num_target_layers": spec.num_target_layers,
            "dflash_config": {"mask_token_id": spec.mask_token_id, "target_layer_ids": list(spec.taps),
                              "block_size": spec.block_size}}


def speculators_config(spec: DrafterSpec, verifier: str | None = None) -> dict[str, Any]:
    attention = _attention(spec)
    return {
        "speculators_model_type": "dflash", "architectures": ["DFlashDraftModel"],
        "transformer_layer_config": {"model_type": "qwen3", **_body_config(spec)},
        "draft_vocab_size": spec.draft_vocab_size, "block_size": spec.network_block_size,
        **({"sample_from_anchor": True} if spec.sample_from_anchor else {}),
        "target_hidden_size": spec.target_hidden_size,
        "aux_hidden_state_layer_ids": list(spec.speculators_taps),
        "mask_token_id": spec.mask_token_id,
        "sliding_window_non_causal": bool(attention.sliding_window_non_causal),
        "speculators_config": {
            "algorithm": "dflash", "default_proposal_method": "greedy",
            "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": spec.block_size - 1}],
            "verifier": {"name_or_path": verifier, "architectures": []},
        },
    }


def dflash2_config(spec: DrafterSpec, config: dict[str, Any], fmt: str) -> dict[str, Any]:
    """A DFlash config made DFlash2 (formats/dflash2.py): speculators' `dflash2` type with the four keys at
    the top level, or the layout vLLM serves: `DFlash2DraftModel` with them (and the scales) in dflash_config."""
    keys = {k: getattr(spec, k) for k in ("conv_kernel_size", "conv_group_size", "selector_rank", "selector_top_k")}
    config = {**config, "architectures": ["DFlash2DraftModel"]}
    if fmt == "speculators":
        config["speculators_config"] = {**config["speculators_config"], "algorithm": "dflash2"}
        return {**config, "speculators_model_type": "dflash2", **keys}
    scales = {k: config.pop(k) for k in ("input_embedding_scale", "output_multiplier", "final_logit_softcapping")
              if k in config}
    return {**config, "dflash_config": {**config["dflash_config"], **keys, **scales}}


BODY_EXCLUDED = ("embed_tokens.weight", "lm_head.weight", "d2t")


def save_checkpoint(
    out_dir: str | Path,
    spec: DrafterSpec,
    state_dict: dict[str, torch.Tensor],
    fmt: str,
    *,
    target_embed: torch.Tensor | None = None,
    target_lm_head: torch.Tensor | None = None,
    verifier: str | None = None,
) -> Path:
    """Write config.json + model.safetensors. speculators also stores frozen copies of the target's
    embedding and lm_head (rows selected by d2t when the draft vocabulary is reduced)."""
    from safetensors.torch import save_file

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().contiguous().cpu() for k, v in state_dict.items()
               if k not in BODY_EXCLUDED and not k.startswith("rotary.")}
    written = as_format(spec, fmt)
    if written.layers != spec.layers and not spec.is_dflash2:
        # the keys of `fmt` read under its own rules would give other masks: refuse to write a checkpoint
        # that every reader would evaluate differently from how it was built (or trained)
        raise ValueError(f"this drafter's attention ({spec.semantics} rules) reads differently as a {fmt} "
                         f"checkpoint: {spec.layers} vs {written.layers}")
    if fmt == "zlab":
        config = zlab_config(spec)
    elif fmt == "speculators" and spec.is_dflash2:  # speculators 0.9.0 saves no embed_tokens / lm_head
        config = speculators_config(spec, verifier)
    elif fmt == "speculators":
        config = speculators_config(spec, verifier)
        embed = state_dict.get("embed_tokens.weight", target_embed)
        head = state_dict.get("lm_head.weight", target_lm_head)
        if embed is None or head is None:
            raise ValueError("speculators checkpoints carry embed_tokens and lm_head: pass the target's")
        tensors["embed_tokens.weight"] = embed.detach().contiguous().cpu()
        if spec.has_d2t:
            d2t = state_dict["d2t"].detach().cpu().long()
            if head.shape[0] != spec.draft_vocab_size:
                head = head[torch.arange(spec.draft_vocab_size) + d2t]
            tensors["d2t"] = d2t
        tensors["lm_head.weight"] = head.detach().contiguous().cpu()
    else:
        raise ValueError(f"unknown format {fmt!r}")
    if spec.is_dflash2:
        config = dflash2_config(spec, config, fmt)
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    return out


def as_format(spec: DrafterSpec, fmt: str) -> DrafterSpec:
    """The spec that reading a checkpoint written with `save_checkpoint(..., fmt)` will produce."""
    own = fmt == "speculators"
    attention = replace(_attention(spec), format=fmt)
    moved = replace(spec, format=fmt, embedding_source="checkpoint" if own else "target",
                    lm_head_source="checkpoint" if own else "target", attention_config=attention)
    return apply_semantics(moved, FORMAT_SEMANTICS[fmt], f"format default ({fmt} checkpoint)")


def write_muse_glimmer(zlab_dir: Path, out: Path, *, sliding_window: int | None = None) -> Path:
    """The same weights as a z-lab checkpoint, written by transformers' own `MuseGlimmerAssistantModel.
    save_pretrained` (the program that defines the muse_glimmer_assistant layout): the body weights moved to
    `encoder.fc` / `encoder.output_norm_enc`, the keys at the top level. `sliding_window` overrides the window
    (transformers' mask admits one row more than z-lab's: formats/muse_glimmer.py)."""
    from safetensors.torch import load_file
    from transformers import MuseGlimmerAssistantConfig, MuseGlimmerAssistantModel

    config = json.loads((Path(zlab_dir) / "config.json").read_text())
    dflash = config["dflash_config"]
    keys = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
            "head_dim", "rms_norm_eps", "rope_parameters", "max_position_embeddings", "layer_types", "vocab_size")
    muse = MuseGlimmerAssistantConfig(
        **{k: config[k] for k in keys}, sliding_window=sliding_window or config.get("sliding_window") or 2048,
        block_size=dflash["block_size"], mask_token_id=dflash["mask_token_id"],
        target_layer_ids=dflash["target_layer_ids"], bos_token_id=None, eos_token_id=None, pad_token_id=None)
    state = load_file(str(Path(zlab_dir) / "model.safetensors"))
    state = {("encoder.output_norm_enc." + k[len("hidden_norm."):] if k.startswith("hidden_norm.") else
              "encoder." + k if k.startswith("fc.") else k): v for k, v in state.items()}
    model = MuseGlimmerAssistantModel(muse)
    model.load_state_dict(state, strict=True)
    model.save_pretrained(str(out))
    return Path(out)


def save_deepspec(out_dir: str | Path, spec: DrafterSpec, state_dict: dict[str, torch.Tensor], target_dir: str | Path,
                  *, target_embed: torch.Tensor, target_lm_head: torch.Tensor, num_anchors: int = 512) -> Path:
    """A DFlash drafter written as DeepSpec writes one (formats/deepspec.py): DeepSpec's `build_draft_config`
    (a copy of the target's config with the drafter's keys; the body sizes and RoPE the drafter's own, as
    its `Qwen3DSparkModel` reads them from that config), saved by transformers' `PretrainedConfig.
    save_pretrained`, and the weights under `Qwen3DSparkModel`'s names with the frozen copies of the target's
    embedding and lm_head. The network runs `spec.network_block_size` slots, DeepSpec's `block_size`; slot 0
    drafts (DeepSpec's reading, whatever `spec` says)."""
    from safetensors.torch import save_file
    from transformers import Qwen3Config

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    attention = _attention(spec)
    if any(kind != "full_attention" for kind in attention.layer_types):
        raise ValueError("DeepSpec's build_draft_config writes every layer full_attention")
    target = json.loads((Path(target_dir) / "config.json").read_text())
    config = Qwen3Config.from_dict({k: v for k, v in target.items() if k not in ("architectures", "model_type")})
    for key, value in {"hidden_size": spec.hidden_size, "intermediate_size": spec.intermediate_size,
                       "num_attention_heads": spec.num_attention_heads, "num_key_value_heads": spec.num_key_value_heads,
                       "head_dim": spec.head_dim, "rms_norm_eps": spec.rms_norm_eps,
                       "attention_bias": spec.attention_bias, "vocab_size": spec.vocab_size,
                       "max_position_embeddings": spec.max_position_embeddings,
                       "rope_parameters": dict(spec.rope)}.items():
        setattr(config, key, value)
    # build_draft_config, step by step
    config.architectures = ["Qwen3DSparkModel"]
    config.num_target_layers = int(target.get("num_hidden_layers", spec.num_target_layers or 0))
    config.num_hidden_layers = spec.num_layers
    config.block_size = spec.network_block_size
    config.tie_word_embeddings = False
    config.layer_types = ["full_attention"] * spec.num_layers
    config.mask_token_id = spec.mask_token_id
    config.target_layer_ids = list(spec.taps)
    config.num_anchors = num_anchors
    config.enable_confidence_head = False
    config.markov_rank = 0
    config.save_pretrained(str(out))
    tensors = {k: v.detach().contiguous().cpu() for k, v in state_dict.items()
               if k not in BODY_EXCLUDED and not k.startswith("rotary.")}
    tensors["embed_tokens.weight"] = target_embed.detach().contiguous().cpu()
    tensors["lm_head.weight"] = target_lm_head.detach().contiguous().cpu()
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    return out
