"""Stage 6, the run document: rows -> per-drafter counts (merged exactly) -> run.json, with the metrics
divided only here, the repetition summary, per-prompt-set breakdowns and full provenance. results.py
documents every field.
"""

from __future__ import annotations

import datetime as dt
import platform
import subprocess
from pathlib import Path
from typing import Any

from ..core import metrics as M
from ..core import results as R
from .continuations import chat_template_hash, tokenizer_hash
from .inputs import thinking_source


def _git_sha() -> str | None:
    try:
        done = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).parent, capture_output=True,
                              text=True, timeout=5)
        return done.stdout.strip() or None if done.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        return None


def repetition_summary(rows: list[dict[str, Any]], per_prompt: dict[str, M.AcceptanceCounts],
                        block_size: int, seed: int) -> dict[str, Any] | None:
    from ..core import repetition

    parts = [repetition.RepetitionCounts.from_dict(r["repetition"]) for r in rows if r.get("repetition")]
    if not parts:
        return None
    total = parts[0]
    for part in parts[1:]:  # pooled: at temperature > 0 a prompt's K samples are one unit (metrics.pool_samples)
        total = total.pooled(part)
    inside, outside = repetition.accepted_inside_outside(total)
    flagged = sorted(repetition.flagged_prompts(total))
    kept = M.AcceptanceCounts(block_size=block_size)
    for pid, counts in per_prompt.items():
        if pid not in flagged:
            kept = kept + counts
    return {
        "blocks": total.blocks, "flagged_blocks": total.flagged_blocks,
        "flagged_share": total.flagged_blocks / total.blocks if total.blocks else None,
        "flagged_by_detector": total.flagged_by_detector,
        "flagged_share_by_slot": [c / total.blocks for c in total.flagged_by_slot] if total.blocks else [],
        "accepted_inside_flagged": inside, "accepted_outside_flagged": outside,
        "flagged_prompts": flagged,
        "tau_macro_without_flagged_prompts": M.tau_macro(kept) if kept.steps else None,
        "counts": total.to_dict(),
    }


def _estimate_object(entry, fingerprints, rows, block_sizes, options) -> dict[str, Any]:
    """A drafter's run.json object at temperature > 0 offline: the estimate's sums (samples pooled per
    prompt) and their summary; no integer acceptance counts exist there."""
    from ..core.estimates import EstimateSums, summary

    sums = EstimateSums(block_sizes[entry.name])
    for r in rows:
        sums = sums.pooled(EstimateSums.from_dict(r["estimate"]))
    return {"name": entry.name, "path": str(entry.path), "format": entry.spec.format,
            "draft_policy": entry.draft_policy or options.draft_policy,
            "fingerprint": fingerprints[entry.name], "spec": entry.spec.to_dict(),
            "metrics": summary(sums, seed=options.seed), "estimate": sums.to_dict(), "counts": None,
            "repetition": None, "by_prompt_set": {}}


def self_consistency_of(rows: list[dict[str, Any]]) -> tuple[int, int]:
    """(agreeing, total) continuation tokens over the prompts (counted once per prompt, not per drafter)."""
    seen: set[str] = set()
    agree = total = 0
    for row in rows:
        if "self_consistency" in row and row["prompt_id"] not in seen:
            seen.add(row["prompt_id"])
            agree, total = agree + row["self_consistency"][0], total + row["self_consistency"][1]
    return agree, total


def drafter_documents(options, entries, rows, fingerprints, block_sizes) -> list[dict[str, Any]]:
    """Each drafter's run.json object from its rows (sorted in prompt order): counts merged exactly,
    metrics divided here. `merge` rebuilds shard runs through the same function."""
    drafter_objects = []
    for entry in entries:
        mine = [r for r in rows if r["drafter"] == entry.name]
        if any("estimate" in r for r in mine) or (options.temperature > 0 and options.mode == "trajectory"):
            drafter_objects.append(_estimate_object(entry, fingerprints, mine, block_sizes, options))
            continue
        per_prompt: dict[str, M.AcceptanceCounts] = {}
        for r in mine:  # the K samples of a prompt (temperature > 0) pool into one unit: metrics.pool_samples
            counts = M.AcceptanceCounts.from_dict(r["counts"])
            pid = r["prompt_id"]
            per_prompt[pid] = M.pool_samples(per_prompt[pid], counts) if pid in per_prompt else counts
        merged = M.AcceptanceCounts(block_size=block_sizes[entry.name])
        for counts in per_prompt.values():
            merged = merged + counts
        by_set = M.by_prompt_set(per_prompt, {r["prompt_id"]: r["prompt_set"] for r in mine}) if per_prompt else {}
        obj = {
            "name": entry.name, "path": str(entry.path), "format": entry.spec.format,
            **({"draft_policy": entry.draft_policy or options.draft_policy} if options.temperature > 0 else {}),
            "fingerprint": fingerprints[entry.name], "spec": entry.spec.to_dict(),
            "metrics": {**R.metrics_summary(merged, seed=options.seed),
                        "prompts_without_steps": sum(1 for c in per_prompt.values() if c.steps == 0)},
            "by_prompt_set": {s: R.metrics_summary(c, seed=options.seed) for s, c in sorted(by_set.items())},
            "repetition": repetition_summary(mine, per_prompt, block_sizes[entry.name], options.seed),
            "counts": merged.to_dict(),
        }
        if options.mode == "live":
            obj["live"] = {"steps": merged.steps, "seconds": sum(sum(r.get("step_seconds", [])) for r in mine),
                           "prefill_seconds": sum(r.get("prefill_seconds", 0.0) for r in mine)}
        drafter_objects.append(obj)
    return drafter_objects


def assemble(options, target, entries, drafters, rows, prompts, thinking, warnings, fingerprints, kernels,
              block_sizes, generated_count: int, evaluated_count: int) -> dict[str, Any]:
    import torch
    import transformers

    from ..core.version import __version__
    from ..model.sampling import sampling_of

    order = {p.id: i for i, p in enumerate(prompts)}
    rows = sorted(rows, key=lambda r: (order.get(r["prompt_id"], 1 << 30), r["drafter"]))
    sets: dict[str, int] = {}
    for p in prompts:
        sets[p.set] = sets.get(p.set, 0) + 1
    agree, total = self_consistency_of(rows)
    drafter_objects = drafter_documents(options, entries, rows, fingerprints, block_sizes)
    text = target.model.config.get_text_config()
    return {
        "schema_version": R.SCHEMA_VERSION,
        "provenance": {
            "dflash_eval": __version__, "torch": torch.__version__, "transformers": transformers.__version__,
            "python": platform.python_version(), "git_sha": _git_sha(), "argv": options.argv,
            "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "target": {"name": target.name, "path": str(target.path), "fingerprint": target.fingerprint(),
                       "model_type": getattr(text, "model_type", None), "num_layers": target.info.num_layers,
                       "hidden_size": target.info.hidden_size, "vocab_size": target.info.vocab_size},
            "tokenizer_hash": tokenizer_hash(target.tokenizer),
            "chat_template_hash": chat_template_hash(target.tokenizer),
            "enable_thinking": thinking,
            "thinking_source": thinking_source(options.thinking, getattr(text, "model_type", "") or ""),
            "max_new_tokens": options.max_new_tokens, "temperature": options.temperature,
            "sampling": ({**sampling_of(options).to_dict(), "samples": options.samples, "seed": options.seed,
                          "generator": "torch.Generator per (seed, prompt id, sample), shared by the drafters"}
                         if options.temperature > 0 else None),
            "dtype": str(target.dtype).removeprefix("torch."), "device": str(target.device),
            "kernels": kernels, "mode": options.mode, "final_block": options.final_block,
            "continuations": (f"responses:{options.responses}" if options.responses else
                              "sampled (K per prompt)" if options.temperature > 0 else "generated"),
            # temperature > 0 offline: every number is the estimate of estimates.py, labelled as such
            "estimate": options.temperature > 0 and options.mode == "trajectory",
            "self_consistency": {"agree": agree, "total": total},
            # with --responses the same count measures how far the external continuations are greedy
            "responses_agreement": {"agree": agree, "total": total} if options.responses else None,
            "prompts": {"source": options.prompts, "count": len(prompts), "sets": sets},
            "warnings": warnings,
            # work done by this invocation (a resumed run counts only what it did itself)
            "work": {"tap_passes": target.tap_passes, "continuations_generated": generated_count,
                     "prompts_evaluated": evaluated_count},
        },
        "drafters": drafter_objects,
    }
