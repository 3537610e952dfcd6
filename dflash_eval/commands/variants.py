"""The doctor's variants: each a way a classic bug would have trained the drafter (doctor's table), the
static checks that run before any drafter, and every variant replayed (or, at temperature > 0, estimated)
on the same cached trajectories. The doctor wing (doctor/commands/doctor.py) composes them with the target
pass and the verdicts; they stay in the main stack because `run --reference` (commands/explain.py) replays
them and `plan` sizes them, and the main stack never imports a wing.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable

import torch

from ..core import metrics as M
from ..core.attention import LayerAttention
from ..core.errors import InputError
from ..core.settings.run_settings import Scoring
from ..core.spec import DrafterSpec
from ..model.engine import replay


def lens_agreement(drafts: list, trajectories: list, tokens: list, keep: list | None = None) -> dict[str, tuple[int, int]]:
    """Per prompt id (samples add up): (slots compared, slots whose draft equals the token). Slot i of
    anchor a (= prompt_len + j) is compared with tokens[t][a + i - 1], the token a lens or argmax puts after
    position a + i - 1, wherever that position and the text's next token exist; keep[t][p] False leaves
    position p out. The logit-lens check and the final-norm check both count with it."""
    table: dict[str, tuple[int, int]] = {}
    for t, (traj, blocks, toks) in enumerate(zip(trajectories, drafts, tokens)):
        n = agree = 0
        for j, block in enumerate(blocks):
            a = traj.prompt_len + j
            for i, draft in enumerate(block, 1):
                p = a + i - 1
                if p < len(toks) and a + i < len(traj.tokens) and (keep is None or keep[t][p]):
                    n += 1
                    agree += int(draft == int(toks[p]))
        s0, a0 = table.get(traj.id, (0, 0))
        table[traj.id] = (s0 + n, a0 + agree)
    return table


@dataclass
class Variant:
    name: str
    bug: str  # what a gain under this variant suggests, phrased for the verdict
    spec: DrafterSpec | None = None  # a modified spec (masks / causality / windows), None = as configured
    taps: tuple[int, ...] | None = None  # target layers to feed instead of the configured ones
    zero_tap: int | None = None  # index into the taps whose features are zeroed
    anchor_in_context: bool = False
    block_offset: int = 0  # block positions shifted relative to the context
    final_norm: bool = False  # taps passed through the target's final norm
    check: str = ""  # what to look at in the training code when this variant closes a gap
    rope: dict | None = None  # RoPE parameters to use instead of the drafter's
    target_tables: bool = False  # the target's embedding and lm_head instead of the checkpoint's copies
    normed_layers: tuple[int, ...] = ()  # these target layers' taps through the target's final norm (doctor/commands/defects.py)
    fc_dtype: str | None = None  # fc computed in this dtype (doctor/commands/defects.py: an fp16 server's overflow)


LENS_LAYERS = 6  # the last layers whose logit lens doctor compares the drafts with (plan sizes them too)

CHECKS = {  # Variant name prefix -> where in a trainer the mismatch lives
    "anchor": "the training attention mask: context rows must be strictly before the anchor (p < a), never the "
              "anchor's own position (where the block mask is built, e.g. a flex-attention mask_mod)",
    "taps shifted": "which hidden states the trainer captures: z-lab target_layer_ids t is the output of decoder "
                    "layer t (HF hidden_states[t + 1]); speculators aux_hidden_state_layer_ids count t + 1",
    "tap": "how many target layers the projection is fed in training (the fc input width against the taps "
           "actually concatenated)",
    "all layers": "the in-block causality of the training mask against the checkpoint's is_causal / "
                  "sliding_window_non_causal keys",
    "sliding windows off": "whether training applied the sliding window the config declares (layer_types, "
                           "use_sliding_window, sliding_window)",
    "rules": "which format's mask rules the trainer followed; export in the format whose rules match, or "
             "evaluate with --semantics",
    "block positions": "the block's position ids in training: the anchor at its own position, slots after it",
    "taps through final norm": "whether the captured target states are taken before the target's final norm",
    "RoPE": "the RoPE settings the drafter was trained with against its config.json (rope_theta, rope_scaling / "
            "rope_parameters); an engine that applies scaling the training did not see collapses acceptance",
    "target's embedding": "the embedding and lm_head copies the checkpoint carries: export them from the very "
                          "target weights the drafter was trained against",
    "final-layer tap": "where the served taps come from: an engine reading HF output_hidden_states[-1] feeds the "
                       "final layer after the target's final norm; tap an earlier layer, or capture the raw output",
    "block_size": "which block_size level each engine reads: write the trained block at one level only",
    "fc computed": "the dtype the server computes fc in: fp16 overflows this fc; serve in bf16 or rescale fc",
}


def check_for(name: str) -> str:
    for prefix, text in CHECKS.items():
        if name.startswith(prefix) or (prefix == "rules" and " rules (" in name):
            return text
    return "the training setup this variant stands for"


def rope_variants(spec: DrafterSpec, target_rope: dict | None) -> list[Variant]:
    """The target's RoPE instead of the drafter's, and the drafter's without the scaling it records (each
    only when it differs from what the drafter uses)."""
    out = []
    own = dict(spec.rope)
    if target_rope and dict(target_rope) != own:
        out.append(Variant(f"RoPE: the target's ({_rope_text(target_rope)})",
                           f"trained with the target's RoPE ({_rope_text(target_rope)}), not the "
                           f"{_rope_text(own)} its config records", rope=dict(target_rope)))
    if own.get("rope_type", "default") != "default":
        plain = {"rope_type": "default", "rope_theta": own.get("rope_theta", 10000.0)}
        out.append(Variant(f"RoPE: no scaling ({_rope_text(plain)})",
                           f"trained without the {own.get('rope_type')} RoPE scaling its config records", rope=plain))
    return out


def _rope_text(rope: dict) -> str:
    """'yarn, theta 1000000.0, factor 4.0, original_max_position_embeddings 32768': readable, no Python dict."""
    def value(v) -> str:
        if isinstance(v, dict):
            return "(" + ", ".join(f"{k} {value(x)}" for k, x in v.items()) + ")"
        if isinstance(v, (list, tuple)):
            return "/".join(value(x) for x in v)
        return str(v)

    extra = [f"{k} {value(v)}" for k, v in rope.items() if k not in ("rope_type", "rope_theta") and v is not None]
    return ", ".join([str(rope.get("rope_type", "default")), f"theta {value(rope.get('rope_theta'))}", *extra])


def table_variant(spec: DrafterSpec) -> list[Variant]:
    """speculators checkpoints carry copies of the target's embedding and lm_head: the variant uses the
    target's own (full vocabulary, no d2t) instead."""
    if spec.embedding_source != "checkpoint" and spec.lm_head_source != "checkpoint":
        return []
    return [Variant("target's embedding and lm_head", "trained against other embedding / lm_head tables than the "
                    "copies the checkpoint carries", target_tables=True,
                    spec=replace(spec, embedding_source="target", lm_head_source="target", has_d2t=False,
                                 draft_vocab_size=spec.vocab_size))]


def compare_tables(drafter, target) -> dict[str, Any]:
    """The checkpoint's embedding / lm_head copies against the target's tables (rows mapped through d2t)."""
    out: dict[str, Any] = {}
    spec = drafter.spec
    for name, source, own, theirs in (("embedding", spec.embedding_source, "embed_tokens", target.embed_tokens),
                                      ("lm_head", spec.lm_head_source, "lm_head", target.lm_head)):
        if source != "checkpoint":
            out[name] = {"compared": False, "detail": "the target's own table is used"}
            continue
        mine = getattr(drafter, own).weight.detach().float()
        full = theirs.weight.detach().float().to(mine.device)
        if name == "lm_head" and spec.has_d2t:
            full = full[drafter.to_target_ids(torch.arange(mine.shape[0], device=mine.device))]
        if mine.shape != full.shape:
            out[name] = {"compared": True, "equal": False, "detail": f"shape {tuple(mine.shape)} vs the target's "
                                                                     f"{tuple(full.shape)}"}
            continue
        diff = (mine - full).abs()
        rows = int((diff.amax(-1) > 0).sum())
        out[name] = {"compared": True, "equal": rows == 0, "rows_differing": rows, "rows": int(mine.shape[0]),
                     "max_abs": float(diff.max()),
                     "detail": "identical to the target's" if rows == 0 else
                               f"{rows} of {mine.shape[0]} rows differ from the target's (max abs {float(diff.max()):.3g})"}
    return out


def build_variants(spec: DrafterSpec, num_layers: int) -> list[Variant]:
    variants = [Variant("as configured", "")]
    variants.append(Variant("anchor in context (p <= a)", "trained with the anchor's own hidden state in its context",
                            anchor_in_context=True))
    for shift in (-1, +1):
        shifted = tuple(t + shift for t in spec.taps)
        if min(shifted) >= 0 and max(shifted) < num_layers:
            variants.append(Variant(f"taps shifted {shift:+d} ({list(shifted)})",
                                    f"trained on target layers shifted by {shift:+d} (z-lab t vs speculators t+1 numbering)",
                                    taps=shifted))
    for k, t in enumerate(spec.taps):
        variants.append(Variant(f"tap {k} zeroed (layer {t})", f"the projection not using tap {k} (layer {t})", zero_tap=k))
    for causal in (True, False):
        layers = tuple(replace(layer, causal_in_block=causal) for layer in spec.layers)
        if layers != spec.layers:
            label = "causal" if causal else "bidirectional"
            variants.append(Variant(f"all layers {label} in block", f"trained with {label} in-block attention",
                                    spec=replace(spec, layers=layers)))
    if any(layer.window is not None for layer in spec.layers):
        layers = tuple(LayerAttention("full", None, layer.causal_in_block) for layer in spec.layers)
        variants.append(Variant("sliding windows off", "trained with full attention where the config has windows",
                                spec=replace(spec, layers=layers)))
    if spec.attention_config is not None:
        from ..core.semantics import VARIANT_SEMANTICS, apply_semantics, rotary_dim, served_differences

        for rules in VARIANT_SEMANTICS:
            if rules == spec.semantics:
                continue
            try:
                other = apply_semantics(spec, rules, f"doctor variant: evaluated with {rules} rules")
            except InputError:  # rules that cannot read this checkpoint (engine_rules.refusal): no variant
                continue
            if (other.layers, other.embedding_scale, other.output_multiplier, other.logit_softcap,
                    rotary_dim(spec.rope, spec.head_dim, rules)) != (
                    spec.layers, spec.embedding_scale, spec.output_multiplier, spec.logit_softcap,
                    rotary_dim(spec.rope, spec.head_dim, spec.semantics)):
                served = served_differences(spec) if rules == "vllm" else []
                variants.append(Variant(f"{rules} rules (--semantics {rules})",
                                        ("served by vLLM 0.33 as it reads the checkpoint: " + "; ".join(served))
                                        if served else
                                        f"trained under {rules}'s attention rules, not the {spec.semantics} rules "
                                        f"its {spec.format} format implies", spec=other))
        served_dim = rotary_dim(spec.rope, spec.head_dim, "vllm")
        if served_dim != rotary_dim(spec.rope, spec.head_dim, spec.semantics):  # the RoPE reading alone
            variants.append(Variant(f"RoPE as vLLM serves it (rotates {served_dim} of {spec.head_dim} dims)",
                                    f"served by vLLM 0.33, which honours partial_rotary_factor "
                                    f"{spec.rope.get('partial_rotary_factor')}; trained rotating the whole head",
                                    spec=replace(spec, semantics="vllm",
                                                 semantics_source="doctor variant: vLLM's rotary, attention as configured")))
    variants.append(Variant("block positions +1", "trained with block position ids offset by one from the context's",
                            block_offset=1))
    variants.append(Variant("taps through final norm", "trained on post-norm target states (double norm)", final_norm=True))
    return variants


def check_taps(taps: torch.Tensor, spec: DrafterSpec, hidden: int, where: str) -> None:
    """The hybrid-extraction bug: taps that are all zero, constant or non-finite. Refuse before drafting."""
    for k, t in enumerate(spec.taps):
        block = taps[:, k * hidden:(k + 1) * hidden].float()
        problem = None
        if not torch.isfinite(block).all():
            problem = "non-finite values"
        elif block.abs().max() == 0:
            problem = "all zero"
        elif (block - block[:1]).abs().max() == 0:
            problem = "constant across positions"
        if problem:
            raise InputError(where, f"captured tap {k} (output of layer {t}) is {problem}: the target's hidden "
                                    "states are broken (e.g. a hybrid layer extraction bug); no drafter was run")


def check_mask_row(embed: torch.Tensor, mask_id: int) -> dict[str, Any]:
    """The MASK row: present, non-zero, and not an untrained row (near-zero norm or a copy of many rows)."""
    if not 0 <= mask_id < embed.shape[0]:
        return {"ok": False, "detail": f"mask_token_id {mask_id} is outside the embedding table ({embed.shape[0]} rows)"}
    from ..core.checkpoint_defects import mask_row

    norms = embed.float().norm(dim=-1)
    row = embed[mask_id].float()
    duplicates = int((embed.float() == row).all(dim=-1).sum()) - 1
    ok, detail = mask_row(float(norms[mask_id]), float(norms.median()), duplicates)  # inspect's rule too
    return {"ok": ok, "detail": detail}


@dataclass
class VariantResult:
    variant: Variant
    counts: M.AcceptanceCounts | None  # greedy; None for an offline estimate (temperature > 0)
    drafts: list  # per trajectory, per anchor: drafted ids, or the alphas of an estimate ("unchanged" vs "equal tau")
    estimate: object = None  # estimates.EstimateSums at temperature > 0
    replays: list = field(default_factory=list)  # greedy: engine.DrafterOnPrompt per trajectory (doctor/commands/windows.py)
    flagged: tuple[int, int] | None = None  # greedy: (flagged blocks, blocks) of the walks (`walk_repetition`)

    def flagged_share(self) -> float | None:
        """The share of this variant's walk blocks flagged as repetitive (does a fix also remove the loops?)."""
        return self.flagged[0] / self.flagged[1] if self.flagged and self.flagged[1] else None

    def per_prompt(self) -> dict:
        return dict(self.counts.per_prompt) if self.counts is not None else dict(self.estimate.per_prompt)

    def tau(self) -> float | None:
        if self.counts is not None:
            return M.tau_macro(self.counts) if self.counts.steps else None
        from ..core.estimates import summary

        return summary(self.estimate)["tau_macro"]


def walk_repetition(replayed, trajectory) -> tuple[int, int]:
    """(flagged blocks, blocks) of one replay's walk on its trajectory, judged by core/repetition.py exactly as
    a run judges its own rows (pipeline/rows.add_repetition: each block against the target's own tokens)."""
    from ..pipeline.rows import add_repetition

    index = {a: i for i, a in enumerate(replayed.anchors)}
    walk = {"prompt_id": trajectory.id, "prompt_len": trajectory.prompt_len, "continuation_ids": trajectory.continuation,
            "walk_anchors": replayed.walk_anchors, "walk_accept_lengths": replayed.walk_accept_lengths,
            "walk_drafts": [replayed.drafts[index[a]] for a in replayed.walk_anchors]}
    add_repetition(walk)
    counts = walk["repetition"] or {"flagged_blocks": 0, "blocks": 0}
    return int(counts["flagged_blocks"]), int(counts["blocks"])


def evaluate_variants(drafter, variants: list[Variant], trajectories: list, final_norm: Callable, hidden: int,
                      scoring: Scoring, sampling=None, lm_head=None, *,
                      tree_budgets: tuple[int, ...] = ()) -> list[VariantResult]:
    """Replay every variant on every cached trajectory (trajectories.Trajectory, one target pass each); at
    temperature > 0 (`sampling`), every variant's offline estimate on the sampled trajectories instead.
    `scoring`: the run's cap, --final-block and anchors per forward (RunSettings.scoring), as its own replay;
    `tree_budgets`: each replay also walks DDTree's tree at those budgets (doctor/commands/trees.py)."""
    from ..core.estimates import EstimateSums

    results = []
    configured = drafter.spec
    for variant in variants:
        block = (variant.spec or configured).block_size  # a block-size variant counts its own slots
        counts = M.AcceptanceCounts(block_size=block)
        sums = EstimateSums(configured.block_size)
        drafts, replays = [], []
        drafter.spec = variant.spec or configured
        saved_rotary, saved_tables = drafter.rotary, {}
        if variant.rope is not None or (drafter.spec.semantics, drafter.spec.rotary_semantics) != (
                configured.semantics, configured.rotary_semantics):  # rules set the rotary too
            drafter.rotary = drafter.rotary_for(variant.rope or drafter.spec.rope)
        if variant.target_tables:
            saved_tables = {n: drafter._modules.pop(n) for n in ("embed_tokens", "lm_head") if n in drafter._modules}
        try:
            for traj in trajectories:
                layers = variant.taps or configured.taps
                feats = [traj.layers[t] for t in layers]
                if variant.final_norm:
                    feats = [final_norm(f) for f in feats]
                feats = [final_norm(f) if t in variant.normed_layers else f for t, f in zip(layers, feats)]
                if variant.zero_tap is not None:
                    feats[variant.zero_tap] = torch.zeros_like(feats[variant.zero_tap])
                taps = torch.cat(feats, dim=-1)
                if sampling is not None:
                    from ..model.estimation import anchor_alphas

                    alphas = anchor_alphas(drafter, taps, traj.tokens, traj.hidden, lm_head, traj.prompt_len,
                                           scoring, sampling, anchor_in_context=variant.anchor_in_context,
                                           block_offset=variant.block_offset)
                    drafts.append(alphas)
                    sums = sums.pooled(EstimateSums.from_anchors(traj.id, configured.block_size, alphas,
                                                                 int(traj.tokens.shape[0]), traj.prompt_len))
                    continue
                result = _replay(drafter, taps, traj, scoring, variant, tree_budgets)
                drafts.append(result.drafts)
                replays.append(result)
                walk = [n - 1 for n in result.walk_accept_lengths]
                if walk:
                    counts = counts + M.AcceptanceCounts.from_walk(traj.id, walk, block, result.walk_drafted)
        finally:
            drafter.spec = configured
            drafter.rotary = saved_rotary
            drafter._modules.update(saved_tables)
        if sampling is None:
            judged = [walk_repetition(r, t) for r, t in zip(replays, trajectories)]
            flagged = (sum(f for f, _ in judged), sum(b for _, b in judged))
            results.append(VariantResult(variant, counts, drafts, replays=replays, flagged=flagged))
        else:
            results.append(VariantResult(variant, None, drafts, sums))
    return results


def _replay(drafter, taps, traj, scoring: Scoring, variant, tree_budgets=()):
    ctx = None
    if variant.fc_dtype is not None:  # fc at that dtype (inf past its range), the rest as configured
        low = getattr(torch, variant.fc_dtype)
        ctx = drafter.hidden_norm((taps.to(low) @ drafter.fc.weight.to(low).T).to(taps.dtype))
    return replay(drafter, taps, traj.tokens, traj.prompt_len, scoring, anchor_in_context=variant.anchor_in_context,
                  block_offset=variant.block_offset, tree_budgets=tree_budgets, ctx=ctx)
