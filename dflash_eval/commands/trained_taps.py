"""`trained-taps DATA`: the hidden states a drafter was trained on, read back from the trainer's own files,
against the taps dflash-eval computes, and the drafter evaluated on both.

The debugging story this tool exists for began here: taps computed one way for training and another for
evaluation (CPU extraction vs fla on GPU; vLLM's last layer before the final norm vs HF's after it; a layer
numbered from the embeddings in one tool and from the first decoder layer in another). Every offline trainer
keeps its taps on disk, so we read them (formats/training_data.py, model/training_taps.py), run the target on
the stored token ids (the run's own tap capture, pipeline/trajectories.py), compare slot by slot against our
tap and its neighbours, with the noise floor measured beside it (trained_taps_floor.py), judge each slot
(core/tap_skew.py), and replay the drafter on the stored fc input and on ours (pipeline/training_eval.py):
the paired gap is what the skew costs. docs/trained-taps.md has the formats and every rule's source.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..core import tap_skew
from ..core.errors import InputError
from ..core.progress import Reporter
from ..core.settings.run_settings import RunSettings
from ..formats.training_data import TrainingData, read_training_data
from .trained_taps_settings import TrainedTapsSettings


@dataclass
class Layout:
    """Which layer each stored slot holds, by its labels (z-lab numbering; -1 = the embeddings)."""

    taps: tuple[int, ...]  # the fc input's slots, in stored (ascending) order
    source: str
    recorded: tuple[int, ...] | None  # the ids as the data or the option give them, in their own numbering
    findings: list[dict[str, Any]] = field(default_factory=list)


def _finding(kind: str, headline: str, line: str) -> dict[str, Any]:
    return {"kind": kind, "headline": headline, "slots": [], "lines": [line]}


def resolve_layout(data: TrainingData, spec, layer_ids: tuple[int, ...] | None, num_layers: int) -> Layout:
    """The stored layers: recorded by the data (DeepSpec manifest, legacy data_config), given (--layer-ids),
    or the drafter's config (speculators: aux_hidden_state_layer_ids, vLLM numbering = ours + 1; SpecForge:
    dflash_config.target_layer_ids). Every trainer stores them ascending; a drafter config listing them in
    another order was trained on the ascending order (reported: dflash-eval evaluates in the config's order,
    as z-lab's extract_context_feature does; vLLM's capture appends in layer order)."""
    where = data.path
    findings: list[dict[str, Any]] = []
    if data.stored_layers is not None and layer_ids is None:
        recorded = data.stored_layers
        ids = recorded[:-1] if data.format == "speculators-legacy" else recorded  # legacy: the last one is the teacher
        if data.format == "speculators-legacy" and max(recorded) != num_layers - 1:
            findings.append(_finding("teacher-layer", "the teacher is not the target's last layer",
                                     f"data_config.json's last layer id is {max(recorded)}, the target's last layer is "
                                     f"{num_layers - 1}: the trainer's labels come from an inner layer"))
        source = "manifest.json target_layer_ids" if data.format == "deepspec" else "data_config.json layer_ids"
    elif layer_ids is not None:
        recorded, source = tuple(layer_ids), "--layer-ids"
        ids = tuple(i - 1 for i in layer_ids) if data.format == "speculators" else tuple(layer_ids)
    elif spec is not None:
        recorded = spec.speculators_taps if data.format == "speculators" else spec.taps
        ids, source = spec.taps, "the drafter's config"
    else:
        raise InputError(where, f"{data.format} data does not record its layers: give -d DRAFTER (its layer ids) or "
                                "--layer-ids" + (" (vLLM numbering, as aux_hidden_state_layer_ids)"
                                                 if data.format == "speculators" else ""))
    bad = [t for t in ids if not -1 <= t < num_layers]
    if bad or len(set(ids)) != len(ids):
        raise InputError(where, f"layer ids {list(recorded)} ({source}) are not distinct layers of the target's "
                                f"{num_layers}")
    taps = tuple(sorted(ids))
    if spec is not None and list(spec.taps) != sorted(spec.taps):
        findings.append(_finding("unsorted", "the drafter's config lists its taps out of order",
                                 f"the drafter's config lists taps {list(spec.taps)}; every trainer stores them ascending "
                                 f"{sorted(spec.taps)}, so fc was trained on that order, while dflash-eval evaluates in "
                                 "the config's order (z-lab's extract_context_feature; vLLM serves ascending)"))
    if spec is not None and sorted(spec.taps) != list(taps):
        findings.append(_finding("layers-differ", "the data holds other layers than the drafter reads",
                                 f"the data holds layers {list(taps)} ({source}), the drafter reads {sorted(spec.taps)}"
                                 + (" (DeepSpec's validate_train_cache refuses this pairing)"
                                    if data.format == "deepspec" else "")))
    return Layout(taps, source, tuple(recorded), findings)


def _ours(traj, layer: int, embeddings):
    return embeddings if layer == -1 else traj.layers[layer]


def compare_sample(target, sample, layout: Layout, traj, hybrid_layers: set[int], teacher_kind: str | None,
                   stats: dict, no_last_layer: bool) -> dict[str, int]:
    """Add this sample's sums to `stats` ({(slot, layer): TapStats}, plus ("teacher", "pre"/"post")); returns
    the greedy agreement counts of its labels with the target's greedy tokens."""
    import torch

    from ..model.tap_compare import tap_stats, teacher_tokens

    n = target.info.num_layers
    ids = sample.input_ids
    embeddings = target.embed_tokens(ids.to(target.device)) if min(layout.taps) <= 0 else None
    for k, layer in enumerate(layout.taps):
        for t in (layer - 1, layer, layer + 1):
            if -1 <= t < n:
                key = (k, t)
                s = tap_stats(sample.slots[:, k], _ours(traj, t, embeddings))
                stats[key] = stats[key] + s if key in stats else s
    teacher = None if no_last_layer else sample.teacher
    if teacher is not None:
        for key, ours in ((("teacher", "pre"), traj.layers[n - 1]), (("teacher", "post"), traj.hidden)):
            s = tap_stats(teacher, ours)
            stats[key] = stats[key] + s if key in stats else s
    supervised = sample.loss_mask[1:].bool()
    if teacher is not None and teacher_kind is not None:
        predicted = teacher_tokens(target, teacher, teacher_kind)[:-1]
    else:
        predicted = ids[1:]  # no teacher: how far the data tokens are the target's greedy choice
    agree = (predicted.cpu() == traj.greedy[:-1].cpu()) & supervised
    return {"agree": int(agree.sum()), "total": int(supervised.sum()), "tokens": int(torch.numel(supervised))}


def judge(layout: Layout, stats: dict, floors: dict, hybrid_layers: set[int], teacher_kind: str | None,
          fmt: str) -> list[dict[str, Any]]:
    """Every stored slot judged against our taps and the floor, with its figures."""
    judged = []
    for k, layer in enumerate(layout.taps):
        against = {t: s for (slot, t), s in stats.items() if slot == k}
        entry = tap_skew.judge_tap(k, layer, against, floors, layer in hybrid_layers)
        entry["against"] = {str(t): s.to_dict() for t, s in sorted(against.items())}
        entry["floor"] = floors[layer].to_dict() if layer in floors else None
        judged.append(entry)
    if ("teacher", "pre") in stats and teacher_kind is not None:
        pre, post = stats[("teacher", "pre")], stats[("teacher", "post")]
        entry = tap_skew.judge_teacher(len(layout.taps), teacher_kind, pre, post, floors.get("pre"), floors.get("post"), fmt)
        entry["against"] = {"pre-norm": pre.to_dict(), "post-norm": post.to_dict()}
        judged.append(entry)
    return judged


@dataclass
class TrainedTaps:
    """What the command computed: the result document, the evaluation rows (run's schema), and what wrote them."""

    result: dict[str, Any]
    rows: list[dict[str, Any]]
    target: Any = None
    entry: Any = None
    drafter: Any = None


def trained_taps(taps: TrainedTapsSettings, settings: RunSettings | None = None, reporter: Reporter | None = None, *,
                 target=None) -> TrainedTaps:
    """The comparison and, with a drafter, the evaluation rows. `settings`: the run's device and anchors per
    forward (default RunSettings()); `target`: an already loaded target (doctor's) to use as the reference
    pass."""
    import time

    from ..formats.checkpoints import checked_spec
    from ..formats.files import resolve_local_or_cached
    from ..model.target import load_target, target_info
    from ..pipeline.inputs import DrafterEntry, split_name
    from .trained_taps_floor import floor_pass, kept_states
    from .trained_taps_samples import evaluate_sample, evaluation_summary, load_checked

    reporter = reporter or Reporter()
    settings = settings or RunSettings()
    started = time.perf_counter()
    taps.check()
    data = read_training_data(taps.data, split=taps.split, train_ratio=taps.train_ratio, limit=taps.limit)
    target_path = resolve_local_or_cached(taps.target)
    info = target_info(target_path)
    entry = None
    if taps.drafter:
        raw, name = split_name(taps.drafter)
        path = resolve_local_or_cached(raw)
        spec, _ = checked_spec(path, info)
        entry = DrafterEntry(name or path.name, path, spec)
    layout = resolve_layout(data, entry.spec if entry else None, taps.layers, info.num_layers)
    if target is None:
        target = load_target(str(target_path), device=settings.placement.device, dtype=taps.dtype)
    n = info.num_layers
    hybrid_layers = {i for i, kind in enumerate(target.layer_types) if kind == "linear_attention"}
    layers = sorted({t for layer in layout.taps for t in (layer - 1, layer, layer + 1) if 0 <= t < n} | {n - 1}
                    | set(entry.spec.taps if entry else ()))
    drafter = None
    if entry is not None:
        from ..pipeline.scoring import load_drafters

        drafter = load_drafters([entry], target)[entry.name]
    stats: dict = {}
    greedy = {"agree": 0, "total": 0}
    rows: list[dict] = []
    skipped, kept, flags = [], [], {"no_last_layer": 0, "padding": 0, "dtypes": set(), "not_evaluated": []}
    compared = 0
    reporter.phase("training samples", len(data.samples))
    for ref in data.samples:
        checked = load_checked(data, ref, target, layout, layers, taps.lock_timeout, skipped, flags)
        if checked is None:
            reporter.advance("training samples", str(ref.index))
            continue
        sample, traj, no_last = checked
        counts = compare_sample(target, sample, layout, traj, hybrid_layers, data.teacher, stats, no_last)
        compared += 1
        greedy = {k: greedy[k] + counts[k] for k in greedy}
        if drafter is not None:
            rows += evaluate_sample(drafter, entry, sample, traj, data, target, no_last,
                                    settings.batching.anchor_batch, flags)
        if len(kept) < taps.noise_samples:
            kept.append(kept_states(target, sample, traj, layers, no_last))
        reporter.advance("training samples", str(ref.index))
    if not compared:
        reason = skipped[0]["reason"] if skipped else "no sample could be compared"
        raise InputError(data.path, f"no sample could be compared ({len(skipped)} skipped; first: {reason})")
    floor_started = time.perf_counter()
    floors, floor_note = floor_pass(target, target_path, settings.placement.device, kept, layout, layers,
                                    data.teacher is not None,
                                    flags["dtypes"], reporter)
    judged = judge(layout, stats, floors, hybrid_layers, data.teacher if not flags["no_last_layer"] else None,
                   data.format)
    found = tap_skew.findings(judged, hybrid_layers) + layout.findings + extra_findings(skipped, flags, layout, data)
    notes = list(data.notes) + ([f"{flags['padding']} trailing pad positions (token 0, mask 0) stripped"]
                                if flags["padding"] else []) + flags["not_evaluated"][:1]
    result = {
        "data": str(data.path), "format": data.format, "split": data.split,
        "samples": {"in_data": data.total, "chosen": len(data.samples), "compared": compared, "skipped": skipped},
        "target": {"path": str(target_path), "num_layers": n, "hidden_size": info.hidden_size,
                   "hybrid_layers": sorted(hybrid_layers), "dtype": str(target.dtype).removeprefix("torch.")},
        "drafter": ({"name": entry.name, "path": str(entry.path), "format": entry.spec.format,
                     "taps": list(entry.spec.taps)} if entry else None),
        "layout": {"taps": list(layout.taps), "source": layout.source,
                   "recorded": list(layout.recorded) if layout.recorded else None, "teacher": data.teacher,
                   "stored_dtypes": sorted(flags["dtypes"])},
        "noise_floor": {"what": floor_note, "samples": len(kept), "factor": tap_skew.NOISE_FACTOR,
                        "per_layer": {str(t): s.to_dict() for t, s in floors.items()}},
        "slots": judged, "greedy": {**greedy, "labels": "stored teacher" if data.teacher and not flags["no_last_layer"]
                                    else "data tokens"},
        "findings": found, "verdict": tap_skew.verdict(found, notes), "notes": notes,
        "evaluation": evaluation_summary(rows, entry, data, taps.seed) if entry is not None else None,
        "passes": {"reference": compared, "noise_floor": len(kept)},
        "seconds": {"reference_and_evaluation": round(floor_started - started, 3),
                    "noise_floor": round(time.perf_counter() - floor_started, 3),
                    "total": round(time.perf_counter() - started, 3)},
    }
    return TrainedTaps(result, rows, target, entry, drafter)


def extra_findings(skipped: list[dict], flags: dict, layout: Layout, data: TrainingData) -> list[dict[str, Any]]:
    """What the files say beside the numbers: samples the trainer would skip, a missing teacher slot."""
    out = []
    mismatched = [s for s in skipped if "other token ids" in s["reason"]]
    if mismatched:
        out.append({"kind": "token-mismatch", "headline": "hidden-state files hold other tokens than their dataset rows",
                    "slots": [], "lines": [f"{len(mismatched)} sample(s): {mismatched[0]['reason']}"]})
    if flags["no_last_layer"]:
        out.append(_finding("no-last-layer", "the data has no teacher slot",
                            f"{flags['no_last_layer']} file(s) hold {len(layout.taps)} layers for {len(layout.taps)} aux "
                            "ids, not one more: extracted with --no-include-last-layer, so speculators' loader takes the "
                            f"last tap (layer {layout.taps[-1]}) as the teacher (speculators #705)"))
    return out
