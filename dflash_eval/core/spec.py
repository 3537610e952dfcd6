"""`DrafterSpec`: the one normalized description of a DFlash drafter.

Both checkpoint formats (z-lab and speculators) are read into this structure, and everything downstream
(the drafter module, the masks, the engine, `inspect`, provenance in run.json) reads only this. The
normalization is where the classic bugs hide, so every field says which numbering or convention it uses.

Conventions (see the primer, sections 1-4):
- `taps` are *output-of-layer* indices, 0-based: tap t is the residual stream after target decoder
  layer t, i.e. HF `output_hidden_states[t + 1]` (z-lab's `target_layer_ids`). speculators'
  `aux_hidden_state_layer_ids` are these plus one.
- Each drafter layer carries its own attention kind, window and in-block causality, together with the
  reason the causality was chosen (config key, format default, or user override), because that setting
  is a real ambiguity between reference implementations.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

from .attention import AttentionConfig, LayerAttention, Scales

Format = Literal["zlab", "speculators", "deepspec"]
Source = Literal["target", "checkpoint"]


@dataclass(frozen=True)
class DrafterSpec:
    format: Format
    path: str  # checkpoint directory as given
    num_layers: int
    hidden_size: int  # drafter hidden size
    target_hidden_size: int  # width of one tap; fc input = len(taps) * target_hidden_size
    intermediate_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float
    attention_bias: bool
    vocab_size: int  # target vocabulary the drafter was built for (config's vocab_size)
    draft_vocab_size: int  # rows of the drafter's lm_head (== vocab_size unless a d2t map exists)
    taps: tuple[int, ...]  # output-of-layer indices (z-lab numbering), in fc input order
    num_target_layers: int | None  # as recorded in the checkpoint, when it records it
    block_size: int  # B: slot 0 is the anchor, slots 1..B-1 are drafted (with sample_from_anchor: see below)
    mask_token_id: int
    layers: tuple[LayerAttention, ...]
    causality_source: str  # why layers[i].causal_in_block is what it is
    rope: dict[str, Any]  # HF rope_parameters (rope_type, rope_theta, scaling fields)
    max_position_embeddings: int
    embedding_source: Source  # block embeddings: the target's table or a copy in the checkpoint
    lm_head_source: Source  # output head: the target's or the checkpoint's own
    has_d2t: bool  # draft id -> target id mapping present (reduced draft vocabulary)
    verifier: str | None = None  # speculators' verifier.name_or_path, if recorded
    ignored_weights: tuple[str, ...] = field(default=())  # present but training-only (never used)
    # Which reference's rules `layers` and the scales follow (semantics.py), and who chose them.
    semantics: str = "speculators"
    semantics_source: str = "designed"
    attention_config: AttentionConfig | None = None  # the raw keys `layers` were derived from
    scales: Scales = field(default_factory=Scales)  # z-lab's scale/cap keys as declared
    embedding_scale: float = 1.0  # block embeddings x this (z-lab input_embedding_scale)
    output_multiplier: float = 1.0  # logits x this (z-lab output_multiplier)
    logit_softcap: float | None = None  # logits -> cap * tanh(logits / cap) (z-lab final_logit_softcapping)
    config_notes: tuple[str, ...] = field(default=())  # keys read with a default or ignored under the rules
    # `partial_rotary_factor` declared at the config's top level (SGLang reads only that one: engine_rules.py)
    partial_rotary_top_level: bool = False
    # the rules whose RoPE reading applies when not `semantics`' own (doctor --engines switches one rule alone)
    rotary_semantics: str | None = None
    # DFlash2 only (None for DFlash; formats/dflash2.py): the grouped dynamic causal convolutions around each
    # layer's attention and MLP (taps over the slots of a block, channels per dynamic kernel), and the
    # candidate selector (rank of its low-rank edge term, unary candidates reranked per slot)
    # a layout read as another (formats/muse_glimmer.py: muse_glimmer_assistant as z-lab), and its weight names:
    # (checkpoint prefix, native prefix) pairs applied at load
    layout: str | None = None
    weight_renames: tuple[tuple[str, str], ...] = field(default=())
    conv_kernel_size: int | None = None
    conv_group_size: int | None = None
    selector_rank: int | None = None
    selector_top_k: int | None = None
    # slot 0's output is the first draft (speculators' `sample_from_anchor`, DeepSpec's DFlash: position j of
    # a block predicts anchor + j + 1). `block_size` then counts the block as every consumer reads it, the
    # anchor and the drafted slots: the checkpoint's block_size + 1, so B - 1 drafts, a walk's steps commit
    # 1..B tokens and every count keeps its meaning; the network runs `network_block_size` = B - 1 slots
    # ([anchor, MASK x B - 2]) and its slot j - 1 drafts slot j (model/drafting.py)
    sample_from_anchor: bool = False
    # the draft length k the checkpoint records for servers (speculators' proposal_methods[0].speculative_tokens)
    speculative_tokens: int | None = None

    @property
    def network_block_size(self) -> int:
        """Slots the drafter's network runs per block: the checkpoint's own block_size."""
        return self.block_size - 1 if self.sample_from_anchor else self.block_size

    @property
    def is_dflash2(self) -> bool:
        return self.selector_top_k is not None

    @property
    def speculators_taps(self) -> tuple[int, ...]:
        """The same taps in speculators/vLLM numbering (residual after k layers = output of layer k-1)."""
        return tuple(t + 1 for t in self.taps)

    @property
    def fc_in_features(self) -> int:
        return len(self.taps) * self.target_hidden_size

    def with_causality(self, causal_sliding: bool | None, causal_full: bool | None, why: str) -> "DrafterSpec":
        """Override in-block causality per layer kind (None keeps the current value)."""
        layers = tuple(
            replace(
                layer,
                causal_in_block=(
                    layer.causal_in_block
                    if (causal_sliding if layer.kind == "sliding" else causal_full) is None
                    else bool(causal_sliding if layer.kind == "sliding" else causal_full)
                ),
            )
            for layer in self.layers
        )
        return replace(self, layers=layers, causality_source=why)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["speculators_taps"] = list(self.speculators_taps)
        return data
