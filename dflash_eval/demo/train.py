"""A minimal DFlash trainer: real trained drafters for fixtures, benchmarks and the bundled demo.

Why this exists: a random-weight drafter has tau ~1 and proves nothing about acceptance, and the doctor
must be tested on drafters that carry the *classic training bugs* for real (a bug injected into weights
by hand would not show the symptoms the doctor looks for). So this trains small drafters on a tiny
target's own greedy continuations (primer sections 1, 2 and 5) and can inject, on request:

- `anchor_in_context`: training mask `p <= a` (the anchor's own hidden state visible as context, the
  train/eval skew of primer section 2); a strict-mask evaluation then collapses;
- `drop_tap`: one tap's features zeroed during training while `fc` keeps `n_taps * H` inputs ("the
  projection fed 4 of 5 layers"); that tap's slice of `fc` ends up dead (exactly zero);
- `shift_taps`: train on layers `t + shift` while the checkpoint records `t` (the z-lab/speculators
  numbering trap of primer section 3); the drafter then scores higher on `t + shift` than on `t`.

What is trained, and why it is built this way:
- Data: one greedy continuation per prompt (`greedy_sequences`), produced by the target's own
  `generate`, so the labels are exactly what the offline replay will compare drafts against. Fixtures
  evaluate on their training sequences: memorisation is expected and fine there.
- Features: taps are captured once per sequence with `target.capture_taps` (forward hooks) and cached
  before the loop; the target is frozen, so recomputing them each step would only cost time.
- Layout: all sequences are packed into one context and every step drafts many anchors in one forward,
  in the flattened layout of `drafting.draft_logits` (same `block_token_ids`, `masks.layer_masks`), plus a
  same-sequence restriction on context rows. Positions restart at 0 in every sequence, so each block sees
  exactly what `draft_logits` over that sequence alone would give it.
- Loss: cross-entropy on slots k = 1..B-1 weighted `exp(-(k - 1) / gamma)` (DFlash's position decay:
  early slots matter most because acceptance stops at the first miss); slot 0 is the anchor and is never
  a prediction; slots past the sequence end are masked out.
- The embedding and lm_head are the target's and stay frozen (z-lab style); only the body trains.
- Fixtures whose bugs must show use `fixture_config()` (every layer a one-row sliding window): with full
  attention and a few hundred anchors the drafter memorises through the whole context and the anchor
  bug does not show at all; see that function. Measured on the tiny qwen3 bed (the 12 demo prompts x 48
  tokens, B = 4, 300 steps, ~3 s on 2 cores): correct drafter tau 3.93 strict / 2.14 lenient, anchor-bug
  drafter 2.07 strict / 3.95 lenient, shifted drafter 3.06 on its recorded taps / 3.93 on t + 1.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from ..model.drafter import DFlashDrafter
from ..model.drafting import block_token_ids
from ..model.masks import block_layout, layer_masks
from ..model.target import Target, capture_taps, lens_tokens
from ..pipeline.prompts import DEMO_PROMPTS  # one list for the demo and the fixtures; re-exported
from .checkpoint_writer import design_spec, save_checkpoint


@dataclass
class TrainConfig:
    block_size: int = 4
    num_layers: int = 2
    steps: int = 300
    lr: float = 3e-3
    anchors_per_step: int = 64  # over all sequences together; all anchors when there are fewer
    gamma: float = 4.0  # slot k weight exp(-(k - 1) / gamma)
    seed: int = 0
    taps: list[int] | None = None  # default: design_spec's rule (z-lab: spread from 1 to L-3)
    sliding_window: int | None = None
    sliding_layers: int = 0
    intermediate_size: int | None = None  # default: design_spec's (3 * hidden)
    warmup_steps: int = 20  # linear warm-up, then cosine decay to 10% of lr
    # injectable classic bugs (primer sections 2-3, /work/shared/seeds):
    anchor_in_context: bool = False  # train with p <= a (the anchor's own hidden state visible as context)
    drop_tap: int | None = None  # index into taps zeroed during training (fc still n_taps wide)
    shift_taps: int = 0  # train on layers t + shift while the checkpoint records t
    # labels from the logit lens of target layer k (lm_head(final_norm(h_k))) instead of the target's real
    # next tokens: the team's "logits taken from layer 61 instead of the final output" bug
    label_layer: int | None = None
    # "plain": labels from lm_head(x * w) where the target's final norm is x * (1 + w) (Qwen3.5/Next), the
    # mis-scaled teacher of speculators <= 0.8.1 (PR #1090); "offset": the target's own final norm
    teacher_norm: str = "offset"


def fixture_config(**changes) -> TrainConfig:
    """A `TrainConfig` for fixture drafters whose injected bugs must show: every layer a window of 1 row.

    Why: trained on a few hundred anchors, a full-attention drafter memorises each sequence through the
    bag of *all* its context rows and never learns to read the newest ones, so training with the anchor
    in context leaves it untouched (measured on the tiny qwen3 bed: tau 3.98 under both masks). Drafters
    trained on corpora they cannot memorise do read the most recent rows; a one-row window forces that
    here, and the bugs then show as they do in the wild (see tests/test_train.py for the numbers)."""
    base = {"sliding_window": 1, "sliding_layers": changes.get("num_layers", TrainConfig.num_layers)}
    return TrainConfig(**{**base, **changes})


def mask_token_id(tokenizer) -> int:
    mask_id = getattr(tokenizer, "mask_token_id", None)
    if mask_id is None:
        mask_id = tokenizer.convert_tokens_to_ids("<|mask|>")
    if mask_id is None or mask_id == getattr(tokenizer, "unk_token_id", None):
        raise ValueError("the target tokenizer has no mask token (<|mask|>) to use as the DFlash MASK")
    return int(mask_id)


def greedy_sequences(target: Target, prompts: list[str], max_new_tokens: int, *,
                     enable_thinking: bool = False) -> list[tuple[torch.Tensor, int]]:
    """(token ids of prompt + greedy continuation, prompt length) per prompt: exactly what `run` replays
    (same chat templating, same greedy generation, cut after the first stop token)."""
    from ..pipeline.continuations import Prompt, generate_greedy, prompt_ids

    out = []
    for index, text in enumerate(prompts):
        ids = prompt_ids(target.tokenizer, Prompt(str(index), text), enable_thinking)
        continuation = generate_greedy(target, [ids], max_new_tokens)[0]
        out.append((torch.tensor(ids + continuation, dtype=torch.long), len(ids)))
    return out


@dataclass
class _Packed:
    """All training sequences laid end to end (the target is frozen: features are computed once)."""

    taps: torch.Tensor  # [C, n_taps * H] float32, a normal (non-inference) tensor
    tokens: torch.Tensor  # [C]
    start: torch.Tensor  # [C] index of the first row of each row's sequence
    end: torch.Tensor  # [C] one past the last row of each row's sequence
    anchors: torch.Tensor  # [M] candidate anchors (continuation positions with >= 1 slot inside)
    labels: torch.Tensor | None = None  # [C] the token each row is trained to predict, when not `tokens`


@torch.inference_mode()
def lens_labels(target: Target, sequences: list[tuple[torch.Tensor, int]], layer: int,
                 plain_norm: bool = False) -> torch.Tensor:
    """[C] per packed row: the token the logit lens of `layer` predicts there (argmax of
    lm_head(final_norm(h_layer)) at the previous position; a sequence's first row keeps its own token)."""
    if not 0 <= layer < target.info.num_layers:
        raise ValueError(f"label_layer {layer} is outside the target's {target.info.num_layers} layers")
    out = []
    for ids, _ in sequences:
        ids = ids.view(-1).cpu()
        hidden = capture_taps(target, ids, [layer]).taps.to(target.device)
        lens = lens_tokens(target, hidden, plain_norm=plain_norm)
        out.append(torch.cat([ids[:1], lens[:-1]]))
    return torch.cat(out).clone()


def pack_sequences(target: Target, sequences: list[tuple[torch.Tensor, int]], capture: list[int]) -> _Packed:
    taps, tokens, start, end, anchors = [], [], [], [], []
    offset = 0
    for ids, prompt_len in sequences:
        ids = ids.view(-1).cpu()
        n = ids.shape[0]
        # clone() outside inference mode: capture_taps returns inference tensors, which autograd
        # refuses to save for backward
        taps.append(capture_taps(target, ids, capture).taps.float().cpu().clone())
        tokens.append(ids)
        start.append(torch.full((n,), offset))
        end.append(torch.full((n,), offset + n))
        # anchor a commits token a and drafts a+1..a+B-1: anchors run over the continuation (the first
        # is the first generated token, as in the replay walk) while slot 1 stays inside the sequence
        anchors.append(torch.arange(prompt_len, n - 1) + offset)
        offset += n
    return _Packed(torch.cat(taps), torch.cat(tokens), torch.cat(start), torch.cat(end), torch.cat(anchors))


def training_logits(drafter: DFlashDrafter, taps: torch.Tensor, tokens: torch.Tensor, anchors: list[int],
                    block_lengths: list[int], *, seq_start: torch.Tensor | None = None,
                    anchor_in_context: bool = False) -> torch.Tensor:
    """Grad-enabled `drafting.draft_logits` for packed sequences: [N, draft_vocab] for every slot.

    taps: [C, n_taps * H] for all packed rows; `seq_start[p]` is the first row of row p's sequence (None:
    one sequence). Context rows of other sequences are hidden, and positions count from each sequence's
    start, so a block gets exactly the logits `draft_logits` over its own sequence alone would give it."""
    device = taps.device
    context_len = taps.shape[0]
    if seq_start is None:
        seq_start = torch.zeros(context_len, dtype=torch.long)
    seq_start = seq_start.to(device)
    ids = block_token_ids(tokens, anchors, block_lengths, drafter.spec.mask_token_id).to(device)
    anchor_of, slot_of, _ = (t.to(device) for t in block_layout(anchors, block_lengths))
    same_sequence = torch.arange(context_len, device=device)[None, :] >= seq_start[anchor_of][:, None]
    per_layer = layer_masks(drafter.spec.layers, anchors, block_lengths, context_len,
                            anchor_in_context=anchor_in_context, device=device)
    distinct: dict[int, torch.Tensor] = {}  # layers that attend alike share one mask tensor: keep that
    for mask in per_layer:
        if id(mask) not in distinct:
            restricted = mask.clone()
            restricted[:, :context_len] &= same_sequence
            distinct[id(mask)] = restricted
    # Keep only the context rows some query can see: attention cost is N x C, and with windows (or few
    # anchors) most packed rows are invisible to every query. Dropping whole never-visible columns from
    # the mask changes nothing, and positions travel with the rows.
    rows = torch.stack([m[:, :context_len].any(0) for m in distinct.values()]).any(0).nonzero().view(-1)
    compact = {key: torch.cat([m[:, rows], m[:, context_len:]], dim=1) for key, m in distinct.items()}
    masks = [compact[id(mask)] for mask in per_layer]
    ctx = drafter.context(taps[rows])
    ctx_positions = rows - seq_start[rows]
    positions = anchor_of - seq_start[anchor_of] + slot_of
    hidden = drafter(ctx, ctx_positions, drafter.embed(ids).to(ctx.dtype), positions, masks)
    return drafter.logits(hidden)


def _lr_at(step: int, config: TrainConfig) -> float:
    if step < config.warmup_steps:
        return config.lr * (step + 1) / config.warmup_steps
    progress = (step - config.warmup_steps) / max(1, config.steps - config.warmup_steps)
    return config.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def optimizer_step(optimizer, loss: torch.Tensor, model: torch.nn.Module, step: int, config: TrainConfig) -> None:
    """One step at the schedule's learning rate (`_lr_at`), gradients clipped to norm 1 (both trainers)."""
    for group in optimizer.param_groups:
        group["lr"] = _lr_at(step, config)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()


def train_drafter(target: Target, sequences: list[tuple[torch.Tensor, int]], config: TrainConfig, out_dir,
                  fmt: str = "speculators", *, saves: "CheckpointSaves | None" = None) -> Path:
    """Train a drafter on `sequences` and write it to `out_dir` in `fmt` ("zlab" or "speculators").

    The training mask follows the rules of `fmt` (semantics.py), so the checkpoint is evaluated the way it
    was trained: speculators' windows count from the anchor, z-lab's from the query. The fixture design
    (one-row windows, `fixture_config`) is speculators' rule: under z-lab's a one-row window sees no
    context at all, so those drafters are speculators checkpoints.

    The checkpoint records `config.taps` (or the default rule), also when `shift_taps` trained it on other
    layers: that is the bug being injected. `train_log.json` beside the weights holds the config, the
    loss curve and timings (extra files do not disturb loading). Deterministic for a fixed seed.

    `saves` writes checkpoints as training goes, in a trainer's layout (`CheckpointSaves`); `out_dir` None
    then skips the final save."""
    if fmt not in ("zlab", "speculators"):
        raise ValueError(f"unknown format {fmt!r}")
    if not sequences:
        raise ValueError("train_drafter: no sequences")
    began = time.perf_counter()
    spec = design_spec(target.info, taps=config.taps, block_size=config.block_size,
                       mask_token_id=mask_token_id(target.tokenizer), num_layers=config.num_layers,
                       intermediate_size=config.intermediate_size, sliding_window=config.sliding_window,
                       sliding_layers=config.sliding_layers, fmt=fmt)
    recorded = list(spec.taps)
    capture = [t + config.shift_taps for t in recorded]
    if any(not 0 <= t < target.info.num_layers for t in capture):
        raise ValueError(f"taps {recorded} shifted by {config.shift_taps} leave the target's "
                         f"{target.info.num_layers} layers")
    if config.drop_tap is not None and not 0 <= config.drop_tap < len(recorded):
        raise ValueError(f"drop_tap {config.drop_tap} is not an index into taps {recorded}")
    width = spec.target_hidden_size
    data = pack_sequences(target, sequences, capture)
    if config.label_layer is not None or config.teacher_norm != "offset":
        if config.teacher_norm not in ("offset", "plain"):
            raise ValueError(f"teacher_norm {config.teacher_norm!r}: choose offset or plain")
        layer = target.info.num_layers - 1 if config.label_layer is None else config.label_layer
        data.labels = lens_labels(target, sequences, layer, config.teacher_norm == "plain")
    if data.anchors.numel() == 0:
        raise ValueError("train_drafter: no sequence has a continuation to draft")
    if config.drop_tap is not None:
        data.taps[:, config.drop_tap * width:(config.drop_tap + 1) * width] = 0

    # Everything random (init, anchor draws) comes from the seed; the caller's RNG is left alone.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(config.seed)
        drafter = DFlashDrafter(spec).float().train()  # torch's default init; RMSNorm weights 1
    if config.drop_tap is not None:
        # The dropped tap's fc slice never gets a gradient (its inputs are zero), so it would keep its
        # random init and the exported drafter would react to that layer with noise. A trainer whose
        # projection really had n_taps - 1 inputs, padded to the recorded width, has zeros there: model that.
        with torch.no_grad():
            drafter.fc.weight[:, config.drop_tap * width:(config.drop_tap + 1) * width] = 0
    # The target's tables, frozen (z-lab style: the checkpoint carries no embedding/lm_head of its own).
    # fp32 CPU copies, so a target loaded in bf16 or on a GPU trains the same way.
    embed = torch.nn.Embedding.from_pretrained(target.embed_tokens.weight.detach().float().cpu(), freeze=True)
    head_weight = target.lm_head.weight.detach().float().cpu()
    head = torch.nn.Linear(head_weight.shape[1], head_weight.shape[0], bias=False).requires_grad_(False)
    head.weight.data = head_weight
    drafter.attach_target(embed, head)
    generator = torch.Generator().manual_seed(config.seed)

    block = config.block_size
    weights = torch.tensor([0.0] + [math.exp(-(k - 1) / config.gamma) for k in range(1, block)])
    optimizer = torch.optim.AdamW(drafter.parameters(), lr=config.lr, betas=(0.9, 0.95), weight_decay=0.0)
    losses = []
    for step in range(config.steps):
        if data.anchors.numel() <= config.anchors_per_step:
            anchors = data.anchors
        else:
            anchors = data.anchors[torch.randperm(data.anchors.numel(), generator=generator)[:config.anchors_per_step]]
        anchors = anchors.sort().values
        anchor_list = anchors.tolist()
        lengths = [block] * len(anchor_list)
        logits = training_logits(drafter, data.taps, data.tokens, anchor_list, lengths, seq_start=data.start,
                                 anchor_in_context=config.anchor_in_context)
        # labels: the sequence token at anchor + k, for slots inside the anchor's own sequence
        label_pos = anchors[:, None] + torch.arange(block)[None, :]
        inside = label_pos < data.end[anchors][:, None]
        labels = (data.tokens if data.labels is None else data.labels)[label_pos.clamp(max=data.tokens.numel() - 1)]
        slot_weight = weights[None, :] * inside
        ce = F.cross_entropy(logits.view(len(anchor_list), block, -1).flatten(0, 1), labels.flatten(),
                             reduction="none").view(len(anchor_list), block)
        loss = (ce * slot_weight).sum() / slot_weight.sum()
        optimizer_step(optimizer, loss, drafter, step, config)
        losses.append(float(loss.detach()))
        if saves is not None and (step + 1) % saves.every == 0:
            saves.save(step + 1, spec, drafter, fmt, target, losses[-1])

    if out_dir is None:
        return saves.last if saves is not None else None
    out = Path(out_dir)
    save_checkpoint(out, spec, drafter.state_dict(), fmt, target_embed=target.embed_tokens.weight,
                    target_lm_head=target.lm_head.weight,
                    verifier=str(target.path) if fmt == "speculators" else None)
    log = {
        "config": asdict(config), "format": fmt, "target": str(target.path),
        "taps_recorded": recorded, "taps_trained": capture,
        "sequences": len(sequences), "candidate_anchors": int(data.anchors.numel()),
        "final_loss": losses[-1], "loss": losses, "seconds": round(time.perf_counter() - began, 3),
    }
    (out / "train_log.json").write_text(json.dumps(log, indent=1) + "\n")
    return out


class CheckpointSaves:
    """Checkpoints written during training, the way the trainers lay them out (what `track` discovers):

    - "hf": `checkpoint-<step>/` + `trainer_state.json` {"global_step"} (HF Trainer);
    - "speculators": `<k>/` per save + `training_state.json` {"epoch", "local_step", "global_step"}, the
      `epoch<k>_end` symlink and `checkpoint_best` (speculators 0.9's checkpointer);
    - "specforge": `epoch_0_step_<step>/` (SpecForge's train_dflash.py; its training_state.pt pickle is
      left out: nothing here would read it).

    Files are written in place, config first, state file last, as the trainers do (not atomically): a
    watcher can see a half-written checkpoint, which is the point. `pause` seconds after each save make a
    run slow enough to watch."""

    def __init__(self, directory, every: int, layout: str = "hf", pause: float = 0.0):
        if layout not in ("hf", "speculators", "specforge"):
            raise ValueError(f"unknown layout {layout!r}")
        self.directory, self.every, self.layout, self.pause = Path(directory), every, layout, pause
        self.count = 0
        self.last: Path | None = None

    def save(self, step: int, spec, drafter, fmt: str, target: Target, loss: float) -> Path:
        index = self.count
        self.count += 1
        name = {"hf": f"checkpoint-{step}", "speculators": str(index), "specforge": f"epoch_0_step_{step}"}[self.layout]
        folder = self.directory / name
        save_checkpoint(folder, spec, drafter.state_dict(), fmt, target_embed=target.embed_tokens.weight,
                        target_lm_head=target.lm_head.weight,
                        verifier=str(target.path) if fmt == "speculators" else None)
        if self.layout == "hf":
            (folder / "trainer_state.json").write_text(json.dumps({"global_step": step, "loss": loss}))
        elif self.layout == "speculators":
            (folder / "training_state.json").write_text(json.dumps({"epoch": index, "local_step": 0,
                                                                      "global_step": step}))
            for link, to in ((f"epoch{index}_end", name), ("checkpoint_best", name)):
                path = self.directory / link
                if path.is_symlink():
                    path.unlink()
                path.symlink_to(to, target_is_directory=True)
        self.last = folder
        if self.pause:
            time.sleep(self.pause)
        return folder


def main(argv: list[str] | None = None) -> None:
    """`python -m dflash_eval.demo.train`: train a fixture drafter on a tiny target's own greedy
    continuations of the demo prompts, saving checkpoints as it goes (the tracker's test, by hand)."""
    import argparse

    from ..model.target import load_target

    parser = argparse.ArgumentParser(prog="python -m dflash_eval.demo.train", description=main.__doc__)
    parser.add_argument("--target", required=True,
                        help="a tiny target folder: the demo's (dflash_eval/demo/models/target) or one of the test "
                             "bed's (python -m dflash_eval.testing.tiny OUT builds OUT/qwen3 and the others)")
    parser.add_argument("--save-dir", required=True)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--save-every", type=int, default=50)
    parser.add_argument("--layout", default="hf", choices=["hf", "speculators", "specforge"])
    parser.add_argument("--format", default="speculators", choices=["speculators", "zlab"])
    parser.add_argument("--max-new-tokens", type=int, default=40)
    parser.add_argument("--block-size", type=int, default=4)
    parser.add_argument("--pause", type=float, default=0.0, help="seconds to wait after each save")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    target = load_target(args.target, device="cpu", dtype="float32")
    sequences = greedy_sequences(target, list(DEMO_PROMPTS), args.max_new_tokens)
    saves = CheckpointSaves(args.save_dir, args.save_every, args.layout, args.pause)
    config = fixture_config(block_size=args.block_size, steps=args.steps, seed=args.seed)
    train_drafter(target, sequences, config, None, args.format, saves=saves)


if __name__ == "__main__":
    main()
