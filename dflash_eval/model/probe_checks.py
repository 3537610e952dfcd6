"""The checks engines added after their own bugs that need tensors (core/checkpoint_defects.py has the rules): the
MASK row of the table the block embeddings come from, and fc's output range at a low-precision dtype.

- MASK row: read from the safetensors files of its owner (the drafter's own `embed_tokens` copy, or the
  target's table) without loading a model: the row, every row's norm (in chunks of rows, exact median) and the
  rows identical to it; with a base checkpoint (`inspect --base`) the same row of the base's table.
- fc range: fc(taps) computed at `dtype` on taps the target produces for a probe text (`inspect --probe`), or on
  a doctor's trajectories, the overflowing outputs counted (a value past the dtype's largest finite value, or
  not finite, once computed at it). RMSNorm makes fc's scale invisible in fp32 and bf16, so a checkpoint with a
  large fc is fine there and broken in fp16 (InternLM/lmdeploy #4991).
"""

from __future__ import annotations

from pathlib import Path

import torch

from ..core import checkpoint_defects as rules
from ..core.errors import InputError
from ..formats.validation import Check

ROWS_PER_CHUNK = 8192


def embedding_table(folder: Path) -> tuple[Path, str] | None:
    """(file, tensor name) of the input embedding table in a checkpoint folder (a VLM's vision tables skipped)."""
    from safetensors import safe_open

    for file in sorted(Path(folder).glob("*.safetensors")):
        with safe_open(str(file), "pt") as handle:
            for name in handle.keys():
                if name.endswith("embed_tokens.weight") and "visual" not in name:
                    return file, name
    return None


def mask_row_facts(file: Path, name: str, mask_id: int) -> dict:
    """{"row", "norm", "median", "duplicates", "rows"} of the table's row `mask_id`."""
    from safetensors import safe_open

    with safe_open(str(file), "pt") as handle:
        table = handle.get_slice(name)
        rows = table.get_shape()[0]
        if not 0 <= mask_id < rows:
            raise InputError(file, f"mask_token_id {mask_id} is outside the embedding table {name} ({rows} rows)")
        row = table[mask_id:mask_id + 1].float()[0]
        norms, duplicates = [], 0
        for start in range(0, rows, ROWS_PER_CHUNK):
            chunk = table[start:start + ROWS_PER_CHUNK].float()
            norms.append(chunk.norm(dim=-1))
            duplicates += int((chunk == row).all(dim=-1).sum())
    norms_all = torch.cat(norms)
    return {"row": row, "norm": float(norms_all[mask_id]), "median": float(norms_all.median()),
            "duplicates": duplicates - 1, "rows": rows}


def mask_row_checks(owner: Path, mask_id: int, base: Path | None = None) -> list[Check]:
    """The MASK row of `owner`'s table, and with `base` the row it was initialised from."""
    found = embedding_table(owner)
    if found is None:
        return [Check("MASK embedding row trained", True, f"no embedding table in {owner} to read", severity="warning")]
    facts = mask_row_facts(*found, mask_id)
    ok, detail = rules.mask_row(facts["norm"], facts["median"], facts["duplicates"])
    checks = [Check("MASK embedding row trained", ok, f"{found[1]} row {mask_id}: {detail}", severity="warning")]
    if base is not None:
        base_found = embedding_table(base)
        if base_found is None:
            raise InputError(base, "--base: no embedding table (*embed_tokens.weight) in this checkpoint")
        base_facts = mask_row_facts(*base_found, mask_id)
        if base_facts["row"].shape != facts["row"].shape:
            raise InputError(base, f"--base: its table rows are {tuple(base_facts['row'].shape)} wide, the "
                                   f"checkpoint's {tuple(facts['row'].shape)}")
        change = float((facts["row"] - base_facts["row"]).abs().max())
        ok, detail = rules.mask_row_moved(change, base_facts["norm"])
        checks.append(Check("MASK row moved from its initialisation (--base)", ok, detail, severity="warning"))
    return checks


def fc_range(fc_weight: torch.Tensor, taps: torch.Tensor, dtype: torch.dtype) -> dict:
    """fc(taps) at `dtype` (taps and weight cast to it, as a server holding both at that dtype computes it):
    {"values", "overflowed", "max_abs" (the fp32 product's largest |value|), "dtype"}."""
    limit = rules.FINITE_MAX.get(str(dtype).removeprefix("torch."))
    exact = taps.float() @ fc_weight.float().T
    at_dtype = (taps.to(dtype) @ fc_weight.to(dtype).T).float()
    bad = ~torch.isfinite(at_dtype)
    if limit is not None:
        bad |= at_dtype.abs() > limit
    return {"values": int(exact.numel()), "overflowed": int(bad.sum()), "max_abs": float(exact.abs().max()),
            "dtype": str(dtype).removeprefix("torch.")}


def fc_check(facts: dict, where: str) -> Check:
    ok, detail = rules.fc_overflow(facts["max_abs"], facts["overflowed"], facts["values"], facts["dtype"])
    return Check(f"fc output within {facts['dtype']}", ok, f"{where}: {detail}", severity="warning")
