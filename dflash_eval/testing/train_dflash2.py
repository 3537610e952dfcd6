"""The fixture trainer for DFlash2 drafters: real trained DFlash2 checkpoints, good and with a classic bug.

Why this exists: the engine, doctor and track tests must cover DFlash2 on drafters that really accept (a
random DFlash2 drafter has tau ~1), and the doctor must see the symptoms of a bug trained in for real. A
DFlash2 drafter is a DFlash body (`train.py`) with grouped dynamic causal convolutions around each layer's
attention and MLP and a candidate selector (model/dflash2.py); both only run in the block layout
(`DFlashDrafter.forward_blocks`), so this trains in that layout, with the pieces of `train.py` reused: the
packed sequences and their cached taps (`pack_sequences`), the learning-rate schedule, the injectable bugs of
`TrainConfig` (`anchor_in_context`, `drop_tap`, `shift_taps`, `label_layer`) and `CheckpointSaves`.

What is trained:
- the whole body (fc, layers with their convolutions, norms) and the selector; the target's embedding and
  lm_head stay frozen (speculators 0.9.0 saves neither: the checkpoint uses the target's);
- loss = the unary cross-entropy on slots 1..B-1 with DFlash's position decay (as `train.py`) + `selector_weight`
  x the selector's: per slot, cross-entropy over the K unary candidates (the top-K of the raw logits, as the
  serving walk takes them) of their edge scores `unary + low-rank(predecessor, hidden, candidate)`, with the
  text's token before the slot as predecessor (the anchor for slot 1: teacher forcing, as speculators'
  `score_candidates` scores them), counted where the true token is among the candidates (elsewhere the
  selector cannot pick it);
- init as speculators 0.9.0 documents it (`model_definitions.py`): convolutions start as the identity (base
  kernel tap 0 = 1, projection 0), codebooks and hidden projection normal(0, 0.02).

Attention follows speculators' rules (the checkpoint is read back under them; the trainer checks that the masks it
trained with are the ones the reader gives). Measured on the tiny qwen3 bed, strict evaluation (engine.replay,
the serving walk; `main`), B = 4, one-row windows: the first 6 demo prompts x 40 tokens with
`dflash2_fixture_config()` (80 steps at lr 6e-3, ~4 s per drafter on 2 cores): good tau 3.84, anchor-in-context
bug 2.68; all 12 prompts, 300 steps at lr 3e-3 (~13 s each): 3.86 and 2.55. The trained selector adds to the
unary argmax there: 2.55 vs 2.30 for the bug drafter with its low-rank term zeroed, 3.86 vs 3.83 for the good one.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch
import torch.nn.functional as F

from ..core.settings.run_settings import Scoring
from ..demo.checkpoint_writer import design_spec, save_checkpoint
from ..demo.train import (
    CheckpointSaves,
    TrainConfig,
    greedy_sequences,
    lens_labels,
    mask_token_id,
    optimizer_step,
    pack_sequences,
)
from ..model.dflash2 import teacher_forced_scores
from ..model.drafter import DFlashDrafter
from ..model.masks import layer_block_masks
from ..model.target import Target
from ..pipeline.prompts import DEMO_PROMPTS


@dataclass
class DFlash2TrainConfig(TrainConfig):
    conv_kernel_size: int = 2
    conv_group_size: int = 16
    selector_rank: int = 16
    selector_top_k: int = 8
    selector_weight: float = 1.0  # the selector's loss next to the unary one
    codebook_std: float = 0.02
    sliding_window_non_causal: bool = True  # speculators 0.9.0's DFlash2 default


def dflash2_fixture_config(**changes) -> DFlash2TrainConfig:
    """`train.fixture_config` for DFlash2: every layer a one-row window, so the injected bugs show, and a short,
    fast schedule (80 steps at lr 6e-3) sized for a few prompts (the tests train on 6)."""
    base = {"sliding_window": 1, "sliding_layers": changes.get("num_layers", DFlash2TrainConfig.num_layers),
            "steps": 80, "lr": 6e-3, "warmup_steps": 10}
    return DFlash2TrainConfig(**{**base, **changes})


def dflash2_spec(target: Target, config: DFlash2TrainConfig):
    """The DFlash2 drafter this config designs, under speculators' rules (its checkpoint format)."""
    spec = design_spec(target.info, taps=config.taps, block_size=config.block_size,
                       mask_token_id=mask_token_id(target.tokenizer), num_layers=config.num_layers,
                       intermediate_size=config.intermediate_size, sliding_window=config.sliding_window,
                       sliding_layers=config.sliding_layers, fmt="speculators",
                       sliding_window_non_causal=config.sliding_window_non_causal)
    return replace(spec, conv_kernel_size=config.conv_kernel_size, conv_group_size=config.conv_group_size,
                   selector_rank=config.selector_rank, selector_top_k=config.selector_top_k)


def _init(spec, config: DFlash2TrainConfig) -> DFlashDrafter:
    drafter = DFlashDrafter(spec).float().train()  # torch's default init; RMSNorm weights 1
    with torch.no_grad():
        for layer in drafter.layers:
            for conv in (layer.attention_conv, layer.mlp_conv):
                conv.base_kernel.zero_()
                conv.base_kernel[:, 0] = 1.0
                conv.kernel_projection.weight.zero_()
        selector = drafter.candidate_selector
        for weight in (selector.predecessor_codebook, selector.successor_codebook, selector.hidden_projection.weight):
            weight.normal_(0.0, config.codebook_std)
    return drafter


def block_hidden(drafter: DFlashDrafter, taps: torch.Tensor, tokens: torch.Tensor, anchors: torch.Tensor,
                 seq_start: torch.Tensor, *, anchor_in_context: bool = False) -> torch.Tensor:
    """Grad-enabled `drafting.draft_hidden` for full blocks over packed sequences: [A, B, H].

    Context rows of other sequences are hidden and positions count from each sequence's start, so a block
    gets what `draft_hidden` over its own sequence alone gives it; only the context rows some query sees are
    projected (with windows most packed rows are invisible to every block)."""
    spec = drafter.spec
    A, B, C = anchors.numel(), spec.block_size, taps.shape[0]
    anchor_list = anchors.tolist()
    per_layer = layer_block_masks(spec.layers, anchor_list, [B] * A, C, anchor_in_context=anchor_in_context)
    same_sequence = (torch.arange(C)[None, :] >= seq_start[anchors][:, None])[:, None, :]  # [A, 1, C]
    distinct = {id(ctx): (ctx & same_sequence, own) for ctx, own in per_layer}
    rows = torch.stack([ctx.any(0).any(0) for ctx, _ in distinct.values()]).any(0).nonzero().view(-1)
    compact = {key: (ctx[..., rows], own) for key, (ctx, own) in distinct.items()}
    masks = [compact[id(ctx)] for ctx, _ in per_layer]
    context_kv = drafter.context_kv(drafter.context(taps[rows]), rows - seq_start[rows])
    ids = torch.full((A, B), spec.mask_token_id, dtype=torch.long)
    ids[:, 0] = tokens[anchors]
    positions = (anchors - seq_start[anchors])[:, None] + torch.arange(B)[None, :]
    return drafter.forward_blocks(context_kv, drafter.embed(ids), positions, masks)


def train_dflash2_drafter(target: Target, sequences: list[tuple[torch.Tensor, int]], config: DFlash2TrainConfig,
                          out_dir, *, saves: CheckpointSaves | None = None) -> Path | None:
    """Train a DFlash2 drafter on `sequences` and write it in speculators' DFlash2 format (formats/dflash2.py)
    to `out_dir` (None: only the checkpoints of `saves`), with `train_log.json` beside it. Deterministic for
    a fixed seed; the caller's RNG is left alone."""
    if not sequences:
        raise ValueError("train_dflash2_drafter: no sequences")
    began = time.perf_counter()
    spec = dflash2_spec(target, config)
    recorded = list(spec.taps)
    capture = [t + config.shift_taps for t in recorded]
    if any(not 0 <= t < target.info.num_layers for t in capture):
        raise ValueError(f"taps {recorded} shifted by {config.shift_taps} leave the target's layers")
    if config.drop_tap is not None and not 0 <= config.drop_tap < len(recorded):
        raise ValueError(f"drop_tap {config.drop_tap} is not an index into taps {recorded}")
    if getattr(config, "teacher_norm", "offset") != "offset":  # a train.py option this trainer does not implement
        raise ValueError(f"teacher_norm {config.teacher_norm!r} is not implemented by the DFlash2 trainer")
    width = spec.target_hidden_size
    data = pack_sequences(target, sequences, capture)
    if config.label_layer is not None:
        data.labels = lens_labels(target, sequences, config.label_layer)
    if data.anchors.numel() == 0:
        raise ValueError("train_dflash2_drafter: no sequence has a continuation to draft")
    dropped = slice(config.drop_tap * width, (config.drop_tap + 1) * width) if config.drop_tap is not None else None
    if dropped is not None:
        data.taps[:, dropped] = 0
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(config.seed)
        drafter = _init(spec, config)
    if dropped is not None:  # as train.py: a projection really fed n_taps - 1 layers has zeros there
        with torch.no_grad():
            drafter.fc.weight[:, dropped] = 0
    embed = torch.nn.Embedding.from_pretrained(target.embed_tokens.weight.detach().float().cpu(), freeze=True)
    head = torch.nn.Linear(*reversed(target.lm_head.weight.shape), bias=False).requires_grad_(False)
    head.weight.data = target.lm_head.weight.detach().float().cpu()
    drafter.attach_target(embed, head)
    generator = torch.Generator().manual_seed(config.seed)

    B = config.block_size
    weights = torch.tensor([math.exp(-(k - 1) / config.gamma) for k in range(1, B)])  # slots 1..B-1
    labels_of = data.tokens if data.labels is None else data.labels
    optimizer = torch.optim.AdamW(drafter.parameters(), lr=config.lr, betas=(0.9, 0.95), weight_decay=0.0)
    losses, selector_losses = [], []
    for step in range(config.steps):
        anchors = data.anchors
        if anchors.numel() > config.anchors_per_step:
            anchors = anchors[torch.randperm(anchors.numel(), generator=generator)[:config.anchors_per_step]]
        anchors = anchors.sort().values
        hidden = block_hidden(drafter, data.taps, data.tokens, anchors, data.start,
                              anchor_in_context=config.anchor_in_context)[:, 1:]  # slots 1..B-1
        label_pos = anchors[:, None] + torch.arange(1, B)[None, :]
        inside = label_pos < data.end[anchors][:, None]
        clamp = label_pos.clamp(max=data.tokens.numel() - 1)
        labels = labels_of[clamp]
        slot_weight = weights[None, :] * inside
        unary = F.cross_entropy(drafter.logits(hidden).flatten(0, 1), labels.flatten(), reduction="none")
        loss = (unary.view_as(slot_weight) * slot_weight).sum() / slot_weight.sum()
        # the selector: K-way cross-entropy of the edge scores, the text's previous token as predecessor
        predecessors = data.tokens[clamp - 1]
        ids, scores = teacher_forced_scores(drafter, hidden.flatten(0, 1), predecessors.flatten())
        hit = ids == labels.flatten()[:, None]
        present = hit.any(-1).view_as(slot_weight)
        selector_weight = slot_weight * present
        selector = F.cross_entropy(scores, hit.float().argmax(-1), reduction="none").view_as(slot_weight)
        selector_loss = (selector * selector_weight).sum() / selector_weight.sum().clamp_min(1e-9)
        total = loss + config.selector_weight * selector_loss
        optimizer_step(optimizer, total, drafter, step, config)
        losses.append(float(loss.detach()))
        selector_losses.append(float(selector_loss.detach()))
        if saves is not None and (step + 1) % saves.every == 0:
            _check_read_back(saves.save(step + 1, spec, drafter, "speculators", target, losses[-1]), spec, target)

    if out_dir is None:
        return saves.last if saves is not None else None
    out = save_checkpoint(Path(out_dir), spec, drafter.state_dict(), "speculators", verifier=str(target.path))
    _check_read_back(out, spec, target)
    log = {"config": asdict(config), "format": "speculators", "speculators_model_type": "dflash2",
           "target": str(target.path), "taps_recorded": recorded, "taps_trained": capture,
           "sequences": len(sequences), "candidate_anchors": int(data.anchors.numel()),
           "final_loss": losses[-1], "final_selector_loss": selector_losses[-1], "loss": losses,
           "selector_loss": selector_losses, "seconds": round(time.perf_counter() - began, 3)}
    (out / "train_log.json").write_text(json.dumps(log, indent=1) + "\n")
    return out


def _check_read_back(path: Path, spec, target: Target) -> None:
    """The checkpoint reads back as the drafter that was trained: DFlash2, same masks and selector."""
    from ..formats.checkpoints import checked_spec

    read, _ = checked_spec(path, target.info)
    fields = ("layers", "block_size", "taps", "conv_kernel_size", "conv_group_size", "selector_rank", "selector_top_k")
    different = [f for f in fields if getattr(read, f) != getattr(spec, f)]
    if different:
        raise ValueError(f"{path}: the DFlash2 checkpoint reads back with other {', '.join(different)} than it was "
                         "trained with")


@torch.inference_mode()
def strict_tau(target: Target, path, sequences: list[tuple[torch.Tensor, int]], max_new_tokens: int) -> float:
    """tau macro of the checkpoint at `path` on `sequences` under the strict evaluation (engine.replay: p < a,
    the serving walk), one walk per sequence: the number `run` reports on them."""
    from ..formats.checkpoints import checked_spec
    from ..formats.files import weight_files
    from ..model.drafter import load_drafter
    from ..model.engine import replay
    from ..model.target import capture_taps

    spec, _ = checked_spec(Path(path), target.info)
    drafter = load_drafter(spec, weight_files(Path(path))).attach_target(target.embed_tokens, target.lm_head)
    taus = []
    for ids, prompt_len in sequences:
        result = replay(drafter, capture_taps(target, ids, list(spec.taps)).taps, ids, prompt_len, Scoring(max_new_tokens))
        taus.append(sum(result.walk_accept_lengths) / max(1, len(result.walk_accept_lengths)))
    return sum(taus) / len(taus)


def main(argv: list[str] | None = None) -> None:
    """`python -m dflash_eval.testing.train_dflash2 --target DIR --out DIR`: a good and an anchor-in-context
    DFlash2 drafter on the first demo prompts, with their strict taus and training seconds."""
    import argparse

    from ..model.target import load_target

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--target", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--limit", type=int, default=6, help="the first N demo prompts")
    parser.add_argument("--steps", type=int, default=80)
    parser.add_argument("--lr", type=float, default=6e-3)
    parser.add_argument("--max-new-tokens", type=int, default=40)
    args = parser.parse_args(argv)
    target = load_target(args.target, device="cpu", dtype="float32")
    sequences = greedy_sequences(target, list(DEMO_PROMPTS)[:args.limit], args.max_new_tokens)
    for name, bug in (("good", False), ("anchor-bug", True)):
        config = dflash2_fixture_config(steps=args.steps, lr=args.lr, anchor_in_context=bug)
        path = train_dflash2_drafter(target, sequences, config, Path(args.out) / name)
        seconds = json.loads((path / "train_log.json").read_text())["seconds"]
        print(f"{name}: tau {strict_tau(target, path, sequences, args.max_new_tokens):.2f} (strict), "
              f"trained in {seconds:.1f} s -> {path}")


if __name__ == "__main__":
    main()
