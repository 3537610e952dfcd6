"""The doctor's window what-ifs by depth: where a sliding-window drafter's acceptance falls away.

A window mistake does no harm while the whole context fits the window and costs acceptance past it, so
the doctor's overall tau can hide it (the seed team's worst skew only showed past ~2K tokens). For a
drafter with sliding-window layers, or given `--draft-window W`, the doctor evaluates these variants on
the SAME trajectories as every other variant (no further target pass) and buckets each one's acceptance
by the anchor's depth (breakdown.py's buckets, `--depth-buckets`):

| curve                          | what it stands for                                                    |
|--------------------------------|-----------------------------------------------------------------------|
| as configured                  | the layers as the checkpoint records them (the doctor's base)         |
| sliding windows off            | full attention on the sliding layers: an engine that ignores the window |
| window W on every layer        | the sliding layers' window on the full layers too (mixed drafters only) |
| served window W (--draft-window) | the last W context rows on every layer, as SGLang serves it          |
| the reference (--reference)    | the reference drafter, as configured                                  |

Then core/depth_verdict.py's rule on pairs of curves: a variant that falls away from the configuration
past depth D is a serving what-if (the engine that does this loses acceptance past D); the configuration
falling away from a variant (or from the reference) past D is a mismatch of the drafter itself, and joins
the doctor's verdict with its likely cause. A greedy (temperature 0) diagnosis.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from ...commands.variants import Variant, VariantResult, evaluate_variants
from ...core import metrics as M
from ...core.attention import LayerAttention
from ...core.breakdown import depth_bounds, depth_bucket, depth_label, parse_depth_buckets, slot_bits, split_row
from ...core.depth_verdict import MARGIN, MIN_STEPS, DepthPoint, describe, falls_away
from ...core.errors import InputError

CONFIGURED, FULL_ON_SLIDING = "as configured", "sliding windows off"  # names in commands/variants.build_variants


def trained_window(spec) -> int | None:
    """The sliding layers' window (the smallest, should they differ); None without sliding layers."""
    windows = [layer.window for layer in spec.layers if layer.window is not None]
    return min(windows) if windows else None


def every_layer_variant(spec) -> Variant | None:
    """(a) The sliding layers' window on every layer, for a drafter with both kinds of layers (a drafter
    whose layers all slide already is that variant)."""
    W = trained_window(spec)
    if W is None or all(layer.window is not None for layer in spec.layers):
        return None
    rule = next(layer.window_from for layer in spec.layers if layer.window is not None)
    layers = tuple(layer if layer.window is not None else LayerAttention("sliding", W, layer.causal_in_block, rule)
                   for layer in spec.layers)
    return Variant(f"window {W} on every layer", f"trained with the window {W} on every layer, the full layers too",
                   spec=replace(spec, layers=layers))


def depth_parts(result: VariantResult, trajectories: list, edges) -> dict[int, M.AcceptanceCounts]:
    """Bucket index -> counts of one variant's replays (breakdown.split_row on each trajectory's walk and
    all-anchor slots, samples of a prompt pooled as for the run's by_depth)."""
    block = result.counts.block_size
    out: dict[int, M.AcceptanceCounts] = {}
    for traj, replay in zip(trajectories, result.replays):
        if not replay.walk_anchors:
            continue
        T = int(traj.tokens.shape[0])
        row = {"prompt_id": traj.id, "prompt_len": traj.prompt_len, "continuation_len": T - traj.prompt_len,
               "walk_accept_lengths": replay.walk_accept_lengths, "walk_drafted": replay.walk_drafted,
               "anchor_slot_correct": slot_bits(replay.slot_correct)}
        steps = [depth_bucket(a, edges) for a in replay.walk_anchors]
        anchors = [depth_bucket(a, edges) for a in replay.anchors]
        for key, counts in split_row(row, block, steps, anchors).items():
            out[key] = M.pool_samples(out[key], counts) if key in out else counts
    return out


def _curve_entry(name: str, kind: str, what: str, parts: dict[int, M.AcceptanceCounts], edges) -> dict[str, Any]:
    buckets = []
    for index, (low, high) in enumerate(depth_bounds(edges)):
        counts = parts.get(index)
        steps = counts.steps if counts is not None else 0
        buckets.append({"bucket": depth_label(low, high), "from": low, "to": high, "steps": steps,
                        "tau_macro": M.tau_macro(counts) if steps else None,  # for readers; the counts decide
                        "counts": counts.to_dict() if counts is not None else None})
    return {"name": name, "kind": kind, "what": what, "buckets": buckets}


def curve_points(entry: dict[str, Any]) -> list[DepthPoint]:
    """A stored curve (counts per bucket) as depth_verdict points: divided here, never stored."""
    out = []
    for b in entry["buckets"]:
        counts = M.AcceptanceCounts.from_dict(b["counts"]) if b["counts"] else None
        steps = counts.steps if counts is not None else 0
        out.append(DepthPoint(b["from"], b["to"], M.tau_macro(counts) if steps else None, steps))
    return out


def _what_if_cause(kind: str, spec, window: int | None) -> str:
    W = trained_window(spec)
    if kind == "full_on_sliding":
        return (f"sliding layers run with full attention past W={W} (an engine that ignores the window): serve it "
                f"with sliding_window {W}")
    if kind == "every_layer":
        return f"the full-attention layers cut to W={W} (an engine that applies one window to every layer)"
    full = sum(layer.window is None for layer in spec.layers)
    if W is not None and window < W and not full:
        return f"a window smaller than the trained one (served W={window} < trained W={W})"
    return (f"a window smaller than the trained one (served W={window}; {full} of {len(spec.layers)} layers "
            "trained with full attention)")


def _mismatch_cause(kind: str, spec, window: int | None) -> str:
    W = trained_window(spec)
    if kind == "full_on_sliding":
        return (f"behaves as if its sliding layers were trained with full attention: check that training applied "
                f"the window (sliding_window {W}) the config declares")
    if kind == "every_layer":
        return (f"behaves as if trained with the window {W} on every layer, not only on the layers the config "
                "marks sliding")
    return (f"behaves as if trained with a window of about {window} rows: acceptance recovers under --draft-window "
            f"{window}; a window lost at export (the config records "
            + ("full attention" if W is None else f"a window of {W}") + ")?")


def window_section(drafter, trajectories: list, results: list[VariantResult], ref_result: VariantResult | None,
                   settings, final_norm, hidden: int, reporter, reference_name: str | None = None) -> dict | None:
    """The doctor's `windows` section (None when there is nothing to compare: no sliding layer, no
    --draft-window, no reference). `results`: the doctor's variants on `trajectories`, results[0] the
    configuration; only the variants not among them are replayed here."""
    spec = drafter.spec
    window = settings.breakdown.draft_window
    extra = [v for v in (every_layer_variant(spec),) if v is not None]
    if trained_window(spec) is None and window is None and ref_result is None:
        return None
    if settings.sampled:
        return {"note": "window variants by depth are a greedy diagnosis (temperature 0); not evaluated"}
    edges = settings.breakdown.edges
    by_name = {r.variant.name: r for r in results}
    chosen = [(results[0], "configured", "the layers as the checkpoint records them")]
    if FULL_ON_SLIDING in by_name:
        chosen.append((by_name[FULL_ON_SLIDING], "full_on_sliding", "full attention on the sliding layers"))
    if extra or window is not None:
        reporter.phase("window variants", len(extra) + (window is not None))
    for variant in extra:
        (result,) = evaluate_variants(drafter, [variant], trajectories, final_norm, hidden, settings.scoring)
        chosen.append((result, "every_layer", variant.bug.replace("trained with ", "")))
        reporter.advance("window variants", variant.name)
    if window is not None:  # SGLang's draft window: the drafter as configured plus masks.block_masks' draft_window
        from ...pipeline.scoring import windowed

        served = Variant(f"served window {window} (--draft-window)", f"served with only the last {window} context rows")
        (result,) = evaluate_variants(windowed(drafter, window), [served], trajectories, final_norm, hidden,
                                      settings.scoring)
        chosen.append((result, "served_window", f"the last {window} context rows on every layer, as SGLang serves it"))
        reporter.advance("window variants", served.name)
    curves = [_curve_entry(r.variant.name, kind, what, depth_parts(r, trajectories, edges), edges)
              for r, kind, what in chosen]
    if ref_result is not None:
        curves.append(_curve_entry(f"reference {reference_name}", "reference", "the reference drafter as configured",
                                   depth_parts(ref_result, trajectories, edges), edges))
    return {"depth_edges": list(edges), "curves": curves, **judge(curves, spec, window)}


def judge(curves: list[dict[str, Any]], spec, window: int | None, *, margin: float = MARGIN,
          min_steps: int = MIN_STEPS) -> dict[str, Any]:
    """The findings over the stored curves (depth_verdict.falls_away on each pair with the configuration)
    and the section's verdict; `mismatch` findings (the configuration falls away) also join the doctor's."""
    points = {c["name"]: curve_points(c) for c in curves}
    base = curves[0]["name"]
    findings = []
    variants = [c for c in curves[1:] if c["kind"] != "reference"]
    for c in variants:
        fall = falls_away(points[c["name"]], points[base], margin=margin, min_steps=min_steps)
        if fall is not None:
            cause = _what_if_cause(c["kind"], spec, window)
            findings.append({"kind": "what_if", "subject": c["name"], "reference": base, "fall": fall.to_dict(),
                             "cause": cause, "text": f"{describe(fall, c['name'], base)}: {cause}"})
        fall = falls_away(points[base], points[c["name"]], margin=margin, min_steps=min_steps)
        if fall is not None and fall.kind == "falls_away":
            cause = _mismatch_cause(c["kind"], spec, window)
            findings.append({"kind": "mismatch", "subject": base, "reference": c["name"], "fall": fall.to_dict(),
                             "cause": cause, "text": f"{describe(fall, base, c['name'])}: {cause}"})
    for ref in (c for c in curves if c["kind"] == "reference"):
        fall = falls_away(points[base], points[ref["name"]], margin=margin, min_steps=min_steps)
        if fall is None or fall.kind != "falls_away":
            continue
        # the likely cause: a window variant that keeps up with the reference where the configuration fell
        explains = [c for c in variants
                    if (other := falls_away(points[c["name"]], points[ref["name"]], margin=margin,
                                            min_steps=min_steps)) is None
                    or (other.kind == "falls_away" and other.depth > fall.depth)]
        cause = (f"{_mismatch_cause(explains[0]['kind'], spec, window)} (the {explains[0]['name']} variant keeps up "
                 "with the reference there)") if explains else (
            "no window variant keeps up with the reference there: not a window matter (positions or RoPE past the "
            "trained length, or training data without long contexts?)")
        findings.append({"kind": "reference", "subject": base, "reference": ref["name"], "fall": fall.to_dict(),
                         "cause": cause, "text": f"{describe(fall, base, ref['name'])}: {cause}"})
    named = [f for f in findings if f["fall"]["kind"] == "falls_away"]
    verdict = ("; ".join(f["text"] for f in named) if named else
               "no curve falls away from another past a depth" + (
                   " (" + "; ".join(f["text"] for f in findings) + ")" if findings else ""))
    return {"rule": {"margin": margin, "min_steps": min_steps,
                     "text": f"below = more than {margin} tau under the other curve in a bucket where both have "
                             f">= {min_steps} walk steps; falls away past D = below from D's bucket in every later "
                             "compared bucket, after a compared bucket where it held up"},
            "findings": findings, "verdict": verdict}


def join_verdict(summary: dict[str, Any], section: dict | None) -> None:
    """A mismatch or reference finding of the window section joins the doctor's verdict (what-ifs stay in the
    section: they say how an engine would serve the drafter, not how it was trained)."""
    if not section:
        return
    own = [f for f in section.get("findings", []) if f["kind"] != "what_if" and f["fall"]["kind"] == "falls_away"]
    if not own:
        return
    text = own[0]["text"]
    if summary.get("finding") is None:
        summary["verdict"], summary["finding"] = text, f"depth: {own[0]['reference']}"
    else:
        summary["verdict"] = f"{summary['verdict']}; also {text}"


def run_window_settings(out: Path, run, depth_buckets: str | None,
                        draft_window: int | None) -> tuple[str | None, int | None]:
    """doctor --out RUN: the run's depth buckets and --draft-window fill what was not given (the doctor's
    curves then pair with the run's by_depth); other depth buckets are refused by name. Another window is
    not: the doctor's served window is a what-if beside the configuration, which it never changes. `run`:
    that run's document."""
    recorded_edges = next((d.get("depth_edges") for d in run.get("drafters") or [] if d.get("depth_edges")), None)
    recorded_window = run["provenance"].get("draft_window")
    if depth_buckets is not None and recorded_edges is not None:
        try:
            given = list(parse_depth_buckets(depth_buckets))
        except ValueError as exc:
            raise InputError(None, f"--depth-buckets {depth_buckets!r}: {exc}") from None
        if given != list(recorded_edges):
            raise InputError(out, f"this run was made with --depth-buckets {_edges_text(recorded_edges)}, doctor was "
                                  f"given {depth_buckets!r}; drop the option to use the run's")
    edges = depth_buckets if depth_buckets is not None or recorded_edges is None else _edges_text(recorded_edges)
    return edges, recorded_window if draft_window is None else draft_window


def _edges_text(edges) -> str:
    return ",".join(str(e) for e in [0, *edges])
