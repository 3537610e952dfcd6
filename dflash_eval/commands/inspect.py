"""`inspect`: everything a user should look at first when a drafter's numbers look wrong.

Library side of the `inspect` command: resolve the drafter (and a target, given or recorded by the
checkpoint), read the spec, run every validation check, and gather the facts the table shows. Nothing
here prints; `render.terminal_inspect.render_inspection` does.
"""

from __future__ import annotations

import math
from pathlib import Path

from ..core.errors import InputError
from ..core.inspection import Check, Inspection
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


PROBE_PROMPTS = 4  # demo prompts the fc probe runs the target over (`inspect --probe`)


def probe_fc(spec: DrafterSpec, weights_folder: Path, target_path: Path, dtype: str) -> Check:
    """`inspect --probe`: the target (CPU, fp32) over the first demo prompts' text, the drafter's taps captured,
    fc computed at `dtype` and its overflow counted (model/probe_checks.py)."""
    import torch
    from safetensors import safe_open

    from ..formats.files import weight_files
    from ..model.probe_checks import fc_check, fc_range
    from ..model.target import capture_taps, load_target
    from ..pipeline.prompts import DEMO_PROMPTS

    target = load_target(str(target_path), device="cpu", dtype="float32")
    ids = target.tokenizer("\n".join(DEMO_PROMPTS[:PROBE_PROMPTS]), return_tensors="pt")["input_ids"][0]
    taps = capture_taps(target, ids, list(spec.taps)).taps
    fc = None
    for file in weight_files(weights_folder):
        with safe_open(str(file), "pt") as handle:
            names = [n for n in handle.keys() if n in ("fc.weight", "encoder.fc.weight")]
            if names:
                fc = handle.get_tensor(names[0])
    if fc is None:
        raise InputError(weights_folder, "no fc.weight in the checkpoint to probe")
    facts = fc_range(fc, taps, getattr(torch, dtype))
    return fc_check(facts, f"{len(ids)} probe tokens (the first {PROBE_PROMPTS} demo prompts) through the target")


def inspect_drafter(drafter: str | Path, target: str | None = None, semantics: str | None = None, *,
                    base: str | None = None, probe: bool = False, probe_dtype: str = "float16",
                    draft_window: int | None = None, engines: bool = False) -> Inspection:
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
    from ..formats.defect_checks import config_of, defect_checks

    config = config_of(path)
    defects = defect_checks(spec, config, info, serving_window=draft_window)
    if probe and target_path is None:
        raise InputError(None, "--probe runs the target over a probe text: give --target (or a drafter that records "
                               "its verifier)")
    checks = validate(spec, weights, info)
    if not [c for c in checks if not c.ok]:  # tensors read only from a checkpoint that passed its own checks
        from ..model.probe_checks import mask_row_checks

        owner = path if spec.embedding_source == "checkpoint" else target_path
        base_path = resolve_local_or_cached(base) if base is not None else None
        if owner is not None:
            defects += mask_row_checks(owner, spec.mask_token_id, base_path)
        elif base_path is not None:
            raise InputError(None, "--base compares the MASK row of the target's table: give --target")
        if probe:
            defects.append(probe_fc(spec, path, target_path, probe_dtype))
    readings = None
    if engines:  # how each engine reads it (core/engine_readings.py), with the teacher's norm for speculators
        from ..core.engine_readings import engine_readings

        norm = None
        if spec.format == "speculators" and target_path is not None:
            from ..core.errors import read_json_object
            from .doctor_norm import norm_case

            target_config = read_json_object(target_path / "config.json", missing="no config.json")
            text = target_config.get("text_config") or target_config
            norm = norm_case(config.get("speculators_version"), text.get("model_type") or target_config.get("model_type"))
        readings = engine_readings(spec, config, verifier_norm=norm,
                                   mask_override=(path / "mask_embedding.pt").exists())
    return Inspection(spec, checks, info, note, mask_text, counts,
                      snapshot_of(path.resolve()), snapshot_of(target_path.resolve()) if target_path else None,
                      defects, readings)
