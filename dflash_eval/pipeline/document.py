"""Stage `document`, the last (rows -> document): rows -> per-drafter counts (merged exactly) -> run.json, with the
metrics divided only here, the repetition summary, per-prompt-set breakdowns and full provenance.
core/documents/run_document.py documents every field.
"""

from __future__ import annotations

import datetime as dt
import functools
import platform
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core import metrics as M
from ..core.breakdown import breakdown_documents
from ..core.documents import results as R
from ..core.semantics import shorter_final_block
from ..core.settings.run_settings import is_long_source
from ..core.snapshots import snapshot_of
from .continuations import chat_template_hash, tokenizer_hash
from .inputs import thinking_source


@dataclass(frozen=True)
class RecordedSpec:
    """A drafter's spec as a run.json recorded it (merge reads shards back): what the run document takes of
    a DrafterSpec, its format and block size and the normalized dict itself."""

    format: str
    block_size: int
    fields: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return self.fields


@dataclass(frozen=True)
class DrafterRecord:
    """What `drafter_documents` reads of a drafter: a loaded entry (pipeline.inputs) has these fields, and so
    does a drafter read back from a run.json (`from_document`, for merge)."""

    name: str
    path: str
    draft_policy: str | None
    spec: RecordedSpec

    @classmethod
    def from_document(cls, drafter: dict[str, Any]) -> DrafterRecord:
        spec = drafter["spec"]
        return cls(name=drafter["name"], path=drafter["path"], draft_policy=drafter.get("draft_policy"),
                   spec=RecordedSpec(format=drafter["format"], block_size=spec["block_size"], fields=spec))


PARTIAL_EVERY_S = 30.0  # run.partial.json: rewritten at most this often ...
PARTIAL_SHARE = 0.05  # ... and never taking more than this share of the run's time


class PartialSchedule:
    """When `run` rewrites run.partial.json: after the first prompt evaluated (so an interrupted run has one
    from the start), then once `PARTIAL_EVERY_S` seconds have passed since the last one and at least 20 times
    (1 / `PARTIAL_SHARE`) the seconds the last one took to build and write.

    Why not after every prompt: the document is built over every row so far (its cost grows with the run:
    quadratic over the run in all), and a GPU waits for it; on a 27B that host work rivalled the GPU's own per
    prompt (issue 47). samples.jsonl still gets every prompt's rows at once (a resume reads them), so an
    interruption loses nothing; run.partial.json (`report --partial`) lags it by at most that interval."""

    def __init__(self, every: float = PARTIAL_EVERY_S, share: float = PARTIAL_SHARE, clock=None):
        import time

        self.every, self.share, self.clock = every, share, clock or time.monotonic
        self.last: float | None = None
        self.cost = 0.0
        self.written = 0

    def due(self) -> bool:
        return self.last is None or self.clock() - self.last >= max(self.every, self.cost / self.share)

    def write(self, write) -> None:
        """Call `write()` (build and write the document) and remember when and how long it took."""
        started = self.clock()
        write()
        self.last = self.clock()
        self.cost, self.written = self.last - started, self.written + 1


@functools.cache
def _git_sha() -> str | None:
    """The checkout's commit, asked of git once per process (a subprocess per document otherwise)."""
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


def _estimate_object(entry, fingerprints, rows, block_sizes, settings) -> dict[str, Any]:
    """A drafter's run.json object at temperature > 0 offline: the estimate's sums (samples pooled per
    prompt) and their summary; no integer acceptance counts exist there."""
    from ..core.estimates import EstimateSums, summary

    sums = EstimateSums(block_sizes[entry.name])
    for r in rows:
        sums = sums.pooled(EstimateSums.from_dict(r["estimate"]))
    return {"name": entry.name, "path": str(entry.path), "format": entry.spec.format,
            "draft_policy": entry.draft_policy or settings.sampling.draft_policy,
            "fingerprint": fingerprints[entry.name], "snapshot": snapshot_of(Path(entry.path).resolve()),
            "spec": entry.spec.to_dict(),
            "metrics": summary(sums, seed=settings.seed), "estimate": sums.to_dict(), "counts": None,
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


def _pooled(rows: list[dict[str, Any]], block_size: int, counts_of) -> tuple[dict[str, M.AcceptanceCounts], M.AcceptanceCounts]:
    """Per-prompt counts (a prompt's K samples pooled into one unit: metrics.pool_samples) and their sum."""
    per_prompt: dict[str, M.AcceptanceCounts] = {}
    for r in rows:
        counts = M.AcceptanceCounts.from_dict(counts_of(r))
        pid = r["prompt_id"]
        per_prompt[pid] = M.pool_samples(per_prompt[pid], counts) if pid in per_prompt else counts
    merged = M.AcceptanceCounts(block_size=block_size)
    for counts in per_prompt.values():
        merged = merged + counts
    return per_prompt, merged


def draft_length_documents(rows: list[dict[str, Any]], block_size: int, merged: M.AcceptanceCounts,
                           seed: int, metrics: dict[str, Any]) -> list[dict[str, Any]] | None:
    """`by_draft_length`: per draft length k the walks' counts (a block of k + 1 slots, replayed or looped
    on its own) merged over prompts and their metrics; k = B - 1 is the checkpoint's own run."""
    ks = sorted({int(k) for r in rows for k in (r.get("by_draft_length") or {})})
    if not ks:
        return None
    out = []
    for k in ks:
        missing = [r["prompt_id"] for r in rows if str(k) not in (r.get("by_draft_length") or {})]
        if missing:
            raise ValueError(f"prompt {missing[0]} has no walk at draft length {k}")
        _, counts = _pooled(rows, k + 1, lambda r, k=k: r["by_draft_length"][str(k)]["counts"])
        out.append({"k": k, "block_size": k + 1, "metrics": R.metrics_summary(counts, seed=seed),
                    "counts": counts.to_dict()})
    out.append({"k": block_size - 1, "block_size": block_size, "checkpoint_block": True,
                "metrics": metrics, "counts": merged.to_dict()})
    return out


def measured_step_times(rows: list[dict[str, Any]], block_size: int, device: str):
    """Live mode: the step times its loop measured (batch 1), per draft length, or None without a timed
    plain decoding step."""
    from ..core.speedup import measured_step_times as build

    one = [r["one_token_step"] for r in rows if r.get("one_token_step")]
    if not one:
        return None
    per_k: dict[int, list[float]] = {}
    for r in rows:
        parts = [(block_size - 1, r)] + [(int(k), e) for k, e in (r.get("by_draft_length") or {}).items()]
        for k, source in parts:
            total = per_k.setdefault(k, [0.0, 0.0, 0])
            total[0] += sum(source.get("verify_seconds", []))
            total[1] += sum(source.get("draft_seconds", []))
            total[2] += len(source.get("verify_seconds", []))
    base = (sum(o["seconds"] for o in one), sum(o["steps"] for o in one))
    return build({k: (v[0], v[1], int(v[2])) for k, v in per_k.items()}, base,
                 f"measured by --mode live on {device}, batch 1 ({base[1]} plain decoding steps timed)")


def speedup_document(by_k: list[dict[str, Any]] | None, metrics: dict[str, Any], block_size: int, times):
    from ..core.speedup import speedup_table

    taus = ({d["k"]: d["metrics"]["tau_micro"] for d in by_k} if by_k else {block_size - 1: metrics["tau_micro"]})
    taus = {k: t for k, t in taus.items() if t is not None}
    return speedup_table(taus, times) if taus else None


def add_tree(obj: dict[str, Any], entry, rows, block_size: int, by_k, times, seed: int) -> None:
    """A drafter's `tree` (core/tree.py `tree_document`) from its rows, with the chain-and-tree speedup table
    when step times are known; nothing without --tree-budgets."""
    from ..core.speedup import tree_speedup_table
    from ..core.tree import DFLASH2_NOTE, tree_document

    dflash2 = entry.spec.to_dict().get("selector_top_k") is not None
    tree = tree_document(rows, block_size, lambda c: R.metrics_summary(c, seed=seed), obj["metrics"],
                         [DFLASH2_NOTE] if dflash2 else [])
    if tree is None:
        return
    if times is not None and obj["counts"]["steps"]:
        chain = {d["k"]: d["metrics"]["tau_micro"] for d in by_k} if by_k else {block_size - 1: obj["metrics"]["tau_micro"]}
        taus = {e["budget"]: e["metrics"]["tau_micro"] for e in tree["by_budget"] if e["metrics"].get("tau_micro")}
        tree["speedup"] = tree_speedup_table({k: t for k, t in chain.items() if t is not None}, taus, block_size, times)
    obj["tree"] = tree


def drafter_documents(settings, entries, rows, fingerprints, block_sizes, step_times=None,
                      device: str = "", breakdown: bool = True) -> list[dict[str, Any]]:
    """Each drafter's run.json object from its rows (sorted in prompt order): counts merged exactly,
    metrics divided here. `merge` rebuilds shard runs through the same function. step_times: drafter
    name -> speedup.StepTimes for the expected speedup (live mode measures its own when not given)."""
    drafter_objects = []
    seed, live = settings.seed, settings.replay.mode == "live"
    for entry in entries:
        mine = [r for r in rows if r["drafter"] == entry.name]
        if any("estimate" in r for r in mine) or settings.estimate:
            drafter_objects.append(_estimate_object(entry, fingerprints, mine, block_sizes, settings))
            continue
        # the K samples of a prompt (temperature > 0) pool into one unit: metrics.pool_samples
        per_prompt, merged = _pooled(mine, block_sizes[entry.name], lambda r: r["counts"])
        by_set = M.by_prompt_set(per_prompt, {r["prompt_id"]: r["prompt_set"] for r in mine}) if per_prompt else {}
        obj = {
            "name": entry.name, "path": str(entry.path), "format": entry.spec.format,
            **({"draft_policy": entry.draft_policy or settings.sampling.draft_policy} if settings.sampled else {}),
            "fingerprint": fingerprints[entry.name], "snapshot": snapshot_of(Path(entry.path).resolve()),
            "spec": entry.spec.to_dict(),
            "metrics": {**R.metrics_summary(merged, seed=seed),
                        "prompts_without_steps": sum(1 for c in per_prompt.values() if c.steps == 0)},
            "by_prompt_set": {s: R.metrics_summary(c, seed=seed) for s, c in sorted(by_set.items())},
            "repetition": repetition_summary(mine, per_prompt, block_sizes[entry.name], seed),
            "counts": merged.to_dict(),
        }
        if live:
            obj["live"] = {"steps": merged.steps, "seconds": sum(sum(r.get("step_seconds", [])) for r in mine),
                           "prefill_seconds": sum(r.get("prefill_seconds", 0.0) for r in mine)}
        if breakdown:  # by depth, segment, token class (not in run.partial.json: breakdown.py)
            obj.update(breakdown_documents(mine, block_sizes[entry.name], merged,
                                           lambda c: R.metrics_summary(c, seed=seed),
                                           settings.breakdown.edges))
        by_k = draft_length_documents(mine, block_sizes[entry.name], merged, seed, obj["metrics"])
        if by_k:
            obj["by_draft_length"] = by_k
        times = (step_times or {}).get(entry.name) or (
            measured_step_times(mine, block_sizes[entry.name], device) if live else None)
        if times is not None and merged.steps:
            obj["speedup"] = speedup_document(by_k, obj["metrics"], block_sizes[entry.name], times)
        add_tree(obj, entry, mine, block_sizes[entry.name], by_k, times, settings.seed)  # --tree-budgets
        drafter_objects.append(obj)
    return drafter_objects


def tree_provenance(settings, text_config) -> dict[str, Any]:
    """run.json's `tree_budgets` and `tree_note` (core/tree.py `hybrid_note`), only with --tree-budgets."""
    from ..core.tree import hybrid_note

    if not settings.trees.budgets:
        return {}
    return {"tree_budgets": settings.trees.tree_budgets,
            "tree_note": hybrid_note(getattr(text_config, "model_type", None), getattr(text_config, "layer_types", None))}


def batching_provenance(settings, drafters: dict, rows: list[dict[str, Any]], device: str) -> dict[str, Any]:
    """What decides the GEMM shapes, hence bf16's near-tie argmaxes: the generation batches (planned over
    the run's prompts after --limit: a shard, rank or resume generates each prompt with the same companions)
    and the anchors per drafter forward the engine ran on each replayed sequence (core/batching.py's rule,
    from the shapes, never the free memory). The bf16 invariance measured on the test targets is in
    docs/gpu.md ("bf16 and batching")."""
    from ..core.batching import anchor_batches, rule_text

    live = settings.replay.mode == "live"  # the live loop drafts one block per forward; the engine never ran
    given = settings.batching
    anchors = {} if live else {name: anchor_batches(
        [r["prompt_len"] + r["continuation_len"] for r in rows if r["drafter"] == name], d.spec.block_size,
        d.spec.num_attention_heads, device, given.anchor_batch) for name, d in drafters.items()}
    return {"generation_batch": given.generation_batch or "auto (device total memory, exact cache bytes, at most 64)",
            "generation_plan": "the run's prompts (after --limit / --seed), sorted by length",
            "anchor_batch": anchors, "anchor_batch_rule": "live: one block per drafter forward" if live else
            "given" if given.anchor_batch else rule_text(device)}


def assemble(settings, target, entries, drafters, rows, prompts, thinking, warnings, fingerprints, kernels,
             block_sizes, generated_count: int, evaluated_count: int, step_times=None,
             content: dict[str, Any] | None = None, breakdown: bool = True, explain: bool = True,
             dataset: dict[str, Any] | None = None) -> dict[str, Any]:
    """run.json from the rows: every drafter's document (`drafter_documents`), the explanation, and the
    provenance of every setting and input the numbers depend on (`dataset`: a Hugging Face cache source's,
    carried by the run's inputs)."""
    import torch
    import transformers

    from ..core.version import __version__

    order = {p.id: i for i, p in enumerate(prompts)}
    rows = sorted(rows, key=lambda r: (order.get(r["prompt_id"], 1 << 30), r["drafter"]))
    sets: dict[str, int] = {}
    for p in prompts:
        sets[p.set] = sets.get(p.set, 0) + 1
    agree, total = self_consistency_of(rows)
    drafter_objects = drafter_documents(settings, entries, rows, fingerprints, block_sizes, step_times,
                                        device=str(target.device), breakdown=breakdown)
    text = target.model.config.get_text_config()
    from ..core.explanation import explanation_documents
    from .inputs import reference_name

    reference = reference_name(settings, list(entries))
    given, sampling, replay = settings.inputs, settings.sampling, settings.replay
    # `run --reference` (commands/explain.py): the final document only, as the breakdown (a partial one after every
    # prompt would redo every variant's bootstrap and permutation test each time)
    explanation = explanation_documents(rows, seed=settings.seed) if explain else []
    return {
        "schema_version": R.SCHEMA_VERSION,
        "provenance": {
            "dflash_eval": __version__, "torch": torch.__version__, "transformers": transformers.__version__,
            "python": platform.python_version(), "git_sha": _git_sha(), "argv": list(settings.output.argv),
            "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "target": {"name": target.name, "path": str(target.path), "fingerprint": target.fingerprint(),
                       "snapshot": snapshot_of(target.path), "model_type": getattr(text, "model_type", None),
                       "num_layers": target.info.num_layers,
                       "hidden_size": target.info.hidden_size, "vocab_size": target.info.vocab_size},
            "inputs": content,  # sha256 of each input file set the numbers depend on (formats.files.target_content)
            "tokenizer_hash": tokenizer_hash(target.tokenizer),
            "chat_template_hash": chat_template_hash(target.tokenizer),
            "enable_thinking": thinking,
            "thinking_source": thinking_source(given.thinking, getattr(text, "model_type", "") or ""),
            "max_new_tokens": given.max_new_tokens, "temperature": sampling.temperature,
            "sampling": ({**sampling.to_dict(), "samples": sampling.samples, "seed": settings.seed,
                          "generator": "torch.Generator per (seed, prompt id, sample), shared by the drafters"}
                         if settings.sampled else None),
            "dtype": str(target.dtype).removeprefix("torch."), "device": str(target.device),
            "numerics": batching_provenance(settings, drafters, rows, str(target.device)),
            "kernels": kernels, "mode": replay.mode, "final_block": replay.final_block,
            # what each drafter's walk used: a drafter under --semantics vllm drafts full blocks whatever
            # --final-block says (semantics.shorter_final_block, vLLM's rule)
            "final_block_by_drafter": {
                e.name: ("shorter" if shorter_final_block(e.spec.semantics, settings.scoring.shorter_final_block)
                         else "full") for e in entries},
            "draft_lengths": settings.serving.draft_lengths,
            **tree_provenance(settings, text),  # --tree-budgets, and what a hybrid target means for trees
            # SGLang's --speculative-draft-window-size: the last W context rows (masks.block_masks)
            "draft_window": settings.breakdown.draft_window,
            "continuations": (f"responses:{given.responses}" if given.responses else
                              "sampled (K per prompt)" if settings.sampled else "generated"),
            # temperature > 0 offline: every number is the estimate of estimates.py, labelled as such
            "estimate": settings.estimate,
            "self_consistency": {"agree": agree, "total": total},
            # with --responses the same count measures how far the external continuations are greedy
            "responses_agreement": {"agree": agree, "total": total} if given.responses else None,
            "prompts": {"source": given.prompts, "count": len(prompts), "sets": sets,  # long_prompts.py packing:
                        # a Hugging Face cache source: repo, revision, files (hf_prompts.py)
                        **({"dataset": dataset} if dataset else {}),
                        **(settings.long_context.provenance() if is_long_source(given.prompts) else {})},
            "warnings": warnings,
            # work done by this invocation (a resumed run counts only what it did itself)
            "work": {"tap_passes": target.tap_passes, "continuations_generated": generated_count,
                     "prompts_evaluated": evaluated_count},
            # --reference: its name in the results and the value given (a path as the user typed it)
            "reference": {"name": reference, "given": settings.drafters.reference} if reference else None,
            "explain": settings.explanation.explain,
            "out": str(settings.out),  # the folder as given: the verdict's commands name it (core/verdict.py)
        },
        "drafters": drafter_objects,
        **({"explanation": explanation} if explanation else {}),
    }
