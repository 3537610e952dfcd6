"""`inspect`: everything a user should look at first when a drafter's numbers look wrong.

Library side of the `inspect` command: resolve the drafter (and a target, given or recorded by the
checkpoint), read the spec, run every validation check, and gather the facts the table shows. Nothing
here prints; `render.terminal_inspect.render_inspection` does.
"""

from __future__ import annotations

import math
from pathlib import Path

from ..core.errors import InputError
from ..core.inspection import Inspection
from ..core.spec import DrafterSpec
from ..formats.checkpoints import read_spec
from ..formats.files import resolve_local_or_cached
from ..formats.validation import validate


def _recorded_target(spec: DrafterSpec) -> Path | None:
    """speculators' verifier.name_or_path: a local path, relative to the drafter, or an HF cache name."""
    if not spec.verifier:
        return None
    relative = Path(spec.path) / spec.verifier
    if relative.is_dir():
        return relative
    try:
        return resolve_local_or_cached(spec.verifier)
    except InputError:
        return None


def inspect_drafter(drafter: str | Path, target: str | None = None, semantics: str | None = None) -> Inspection:
    from ..core.semantics import SEMANTICS, apply_semantics
    from ..model.target import target_info

    path = resolve_local_or_cached(str(drafter))
    spec, weights, _ = read_spec(path)
    if semantics is not None:
        if semantics not in SEMANTICS:
            raise InputError(None, f"--semantics {semantics!r}: unknown rules (choose from {', '.join(SEMANTICS)})")
        spec = apply_semantics(spec, semantics, f"override: --semantics {semantics}")
    from dataclasses import replace

    from ..core.semantics import served_differences

    spec = replace(spec, config_notes=(*spec.config_notes, *(f"served differently by vLLM 0.33: {d} (`doctor` scores "
                                                              "both readings)" for d in served_differences(spec))))
    target_path: Path | None = None
    if target is not None:
        target_path = resolve_local_or_cached(target)
        note = f"--target {target}"
    else:
        target_path = _recorded_target(spec)
        note = (f"recorded verifier {spec.verifier}" if target_path else
                "none given: target-dependent checks skipped (pass --target)")
    info = target_info(target_path) if target_path else None
    mask_text = None
    if target_path is not None:
        try:
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(target_path, local_files_only=True)
            if 0 <= spec.mask_token_id < len(tokenizer):
                mask_text = tokenizer.convert_ids_to_tokens(spec.mask_token_id)
        except (OSError, ValueError):
            mask_text = None
    counts = {"body": 0, "embedding": 0, "lm_head": 0}
    for name, meta in weights.items():
        group = "embedding" if name.startswith("embed_tokens") else "lm_head" if name.startswith("lm_head") else "body"
        if name not in spec.ignored_weights and name not in ("d2t",):
            counts[group] += math.prod(meta.shape)
    from ..core.snapshots import snapshot_of

    return Inspection(spec, validate(spec, weights, info), info, note, mask_text, counts,
                      snapshot_of(path.resolve()), snapshot_of(target_path.resolve()) if target_path else None)
