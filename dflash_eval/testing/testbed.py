"""Drafter checkpoints for the test bed, benchmarks and the demo (targets come from `tiny.py`).

Random-weight drafters are enough to test arithmetic (formats, masks, validation); acceptance tests
use drafters trained by `train.py`, since a random drafter's tau is ~1 and proves nothing.
"""

from __future__ import annotations

from pathlib import Path

import torch

from ..core.spec import DrafterSpec
from ..demo.checkpoint_writer import design_spec, save_checkpoint
from ..model.drafter import DFlashDrafter


def tiny_target_tables(target_dir: str | Path) -> tuple[torch.Tensor, torch.Tensor]:
    """The target's input embedding and lm_head weights, read straight from its safetensors."""
    from safetensors import safe_open

    embed = head = None
    for file in sorted(Path(target_dir).glob("*.safetensors")):
        with safe_open(str(file), "pt") as handle:
            for name in handle.keys():
                if name.endswith("embed_tokens.weight") and "visual" not in name:
                    embed = handle.get_tensor(name)
                elif name.endswith("lm_head.weight"):
                    head = handle.get_tensor(name)
    if embed is None or head is None:
        raise FileNotFoundError(f"{target_dir}: no embed_tokens/lm_head weights found")
    return embed, head


def random_state_dict(spec: DrafterSpec, seed: int = 0, std: float = 0.08) -> dict[str, torch.Tensor]:
    """Seeded normal weights (norm weights near 1) for every tensor of the drafter's body."""
    generator = torch.Generator().manual_seed(seed)
    model = DFlashDrafter(spec)
    state = {}
    for name, tensor in model.state_dict().items():
        if name.startswith("rotary.") or name == "d2t":
            continue
        noise = torch.randn(tensor.shape, generator=generator) * std
        state[name] = 1.0 + noise if name.endswith("norm.weight") else noise
    return state


def reduced_vocab_d2t(vocab_size: int, draft_vocab_size: int, keep: list[int], seed: int = 0) -> torch.Tensor:
    """d2t for a draft vocabulary of `draft_vocab_size` sorted target ids that includes `keep`."""
    generator = torch.Generator().manual_seed(seed)
    others = [i for i in torch.randperm(vocab_size, generator=generator).tolist() if i not in keep]
    chosen = sorted(set(keep) | set(others[: draft_vocab_size - len(set(keep))]))
    ids = torch.tensor(chosen, dtype=torch.long)
    return ids - torch.arange(draft_vocab_size)


def write_random_drafter(target_dir: str | Path, out_dir: str | Path, fmt: str = "zlab", *, seed: int = 0,
                         state: dict[str, torch.Tensor] | None = None, verifier: str | None = None,
                         **design) -> Path:
    """A random-weight drafter for the tiny target in `target_dir`, in either checkpoint format."""
    from transformers import AutoTokenizer

    from ..model.target import target_info

    info = target_info(target_dir)
    tokenizer = AutoTokenizer.from_pretrained(target_dir, local_files_only=True)
    mask_id = tokenizer.convert_tokens_to_ids("<|mask|>")
    spec = design_spec(info, mask_token_id=mask_id, fmt=fmt, **design)
    state = dict(state) if state is not None else random_state_dict(spec, seed)
    embed, head = tiny_target_tables(target_dir)
    if spec.has_d2t and "d2t" not in state:
        state["d2t"] = reduced_vocab_d2t(info.vocab_size, spec.draft_vocab_size, keep=[mask_id], seed=seed)
    return save_checkpoint(out_dir, spec, state, fmt, target_embed=embed, target_lm_head=head, verifier=verifier)


def write_repeat_anchor_drafter(target_dir: str | Path, out_dir: str | Path, *, block_size: int = 8) -> Path:
    """A speculators-format drafter whose every slot drafts its anchor token again: the extreme of the
    degenerate drafts ("elif elif elif") that repetition detection must flag.

    Construction: fc = 0 makes the context zero; the checkpoint's MASK embedding row is zero, so only the
    anchor slot carries a value; q = 0 gives uniform attention, and identity v/o projections copy the
    (normalized) anchor embedding into every slot; with no MLP and the lm_head tied to the embedding the
    argmax is the anchor token itself (its own row has by far the largest dot product)."""
    from transformers import AutoTokenizer

    from ..model.target import target_info

    info = target_info(target_dir)
    tokenizer = AutoTokenizer.from_pretrained(target_dir, local_files_only=True)
    mask_id = tokenizer.convert_tokens_to_ids("<|mask|>")
    heads = 4
    spec = design_spec(info, mask_token_id=mask_id, block_size=block_size, num_layers=1, num_attention_heads=heads,
                       num_key_value_heads=heads, head_dim=info.hidden_size // heads, fmt="speculators")
    state = {name: torch.zeros_like(t) for name, t in random_state_dict(spec).items()}
    for name in state:
        if name.endswith("norm.weight"):
            state[name] = torch.ones_like(state[name])
    eye = torch.eye(info.hidden_size)
    state["layers.0.self_attn.v_proj.weight"] = eye.clone()
    state["layers.0.self_attn.o_proj.weight"] = eye.clone()
    embed, _ = tiny_target_tables(target_dir)
    embed = embed.clone()
    embed[mask_id] = 0.0
    state["embed_tokens.weight"] = embed
    state["lm_head.weight"] = embed.clone()
    return save_checkpoint(out_dir, spec, state, "speculators", verifier=str(target_dir))


if __name__ == "__main__":  # a library of drafter writers; say where the runnable pieces are
    raise SystemExit("dflash_eval.testing.testbed writes drafters from Python (write_random_drafter); tiny targets: "
                     "python -m dflash_eval.testing.tiny OUT_DIR; trained checkpoints: python -m "
                     "dflash_eval.demo.train --target DIR --save-dir DIR")
