"""The attention a drafter checkpoint declares and the attention one drafter layer gets: the raw keys
(`AttentionConfig`, `Scales`) that semantics.py turns into per-layer rules (`LayerAttention`) under a named
reference's reading. Apart from both so that the spec (which holds them) and the rules (which derive them)
import this, not each other."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class LayerAttention:
    """How one drafter layer attends (derived from the checkpoint's keys under one rule set: semantics.py)."""

    kind: Literal["full", "sliding"]
    window: int | None  # W, or None: no window on this layer
    causal_in_block: bool  # slot j sees own-block slots <= j (True) or all slots (False)
    # "anchor" (speculators): context rows a - W <= p < a, no window inside the block;
    # "query" (z-lab, vLLM, SGLang): key k visible iff q - k < W (and k - q < W when not causal), inside the block too;
    # "query_left" (llama.cpp's LLAMA_SWA_TYPE_STANDARD): q - k < W only, no limit to the right in a bidirectional block
    window_from: Literal["anchor", "query", "query_left"] = "anchor"


@dataclass(frozen=True)
class AttentionConfig:
    """The attention keys a checkpoint declares, normalized as HF `Qwen3Config` normalizes them."""

    layer_types: tuple[str, ...]  # "full_attention" / "sliding_attention" per drafter layer (HF default rule applied)
    sliding_window: int | None  # after HF: None when use_sliding_window is false or missing
    declared_window: int | None  # the raw `sliding_window` key, for the report
    use_sliding_window: bool | None  # raw key (None: absent)
    is_causal: bool | None  # raw top-level key, read by z-lab and vLLM
    sliding_window_non_causal: bool | None  # raw key, read by speculators (and vLLM's speculators adapter)
    dflash_causal: bool | None = None  # raw `dflash_config.causal`, read by vLLM only
    format: str = "zlab"  # the checkpoint's format (vLLM's speculators adapter treats it differently)


@dataclass(frozen=True)
class Scales:
    """z-lab's three numeric keys, as declared (None: absent)."""

    input_embedding_scale: float | None = None
    output_multiplier: float | None = None
    final_logit_softcapping: float | None = None

    def any(self) -> bool:
        return any(v is not None for v in (self.input_embedding_scale, self.output_multiplier,
                                           self.final_logit_softcapping))
