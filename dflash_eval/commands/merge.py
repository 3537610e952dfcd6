"""`dflash-eval merge SHARD... --out DIR`: shard run folders (`run --shard I/N`, or the ranks of a torchrun
launch) joined into the run one process would have written.

Exact by construction: every shard stores integer counts per prompt, so the merged counts are sums and
the metrics are divided once, here, by the same `document.drafter_documents` a single run uses (same
bootstrap seed, same prompt order). Refused by name: shards of different runs (any setting but the shard
index differs), a shard given twice, shards missing, a prompt in two shards, an unfinished shard.

What run.json holds beyond the rows' counts is carried over exactly too: the depth split uses the shards'
recorded bucket edges (`--depth-buckets`; shards split with other edges are refused by name), and the
expected speedup is recomputed from the merged per-k counts with the step times the shards recorded (a
file's entries; the roofline's accelerator and model shapes at the whole run's mean context, which one
process would have used; live timings from the rows). Shards whose speedups were modelled with other
step times are refused by name.
"""

from __future__ import annotations

import copy
import datetime as dt
from pathlib import Path
from typing import Any

from ..core.batching import merged_anchor_batches
from ..core.documents import results as R
from ..core.documents.run_rows import run_rows
from ..core.errors import InputError, read_json_object
from ..core.settings.run_settings import RunSettings
from ..pipeline.document import DrafterRecord, drafter_documents, self_consistency_of
from ..pipeline.numerics import merge_measured
from ..pipeline.run_folder import RunFolder, claimed, settings_differences
from .evaluate import Evaluation


def _read_shard(path: Path) -> dict[str, Any]:
    state = read_json_object(path / R.STATE, missing="not a dflash-eval run folder (no run_state.json)")
    settings = state.get("settings") or {}
    if not isinstance(settings.get("shard"), dict):
        raise InputError(path, "is not a shard (made without --shard I/N)")
    from ..core.errors import regular_file_present

    if not state.get("complete") or not regular_file_present(path / R.RUN_JSON):
        raise InputError(path, "is an unfinished shard: rerun its `dflash-eval run --shard` command to finish it")
    run = R.read_run_document(path)
    rows = run_rows(path, run)  # a torn, cut or duplicated shard is refused by name, never merged short
    return {"path": path, "settings": settings, "run": run, "rows": rows}


def merge(shard_dirs: list[Path], out: Path, *, overwrite: bool = False, argv: list[str] | None = None,
          html: bool = True) -> Evaluation:
    """The merged run folder (written, with report.html when `html`, then its lock released): its document
    and rows, as `evaluate` returns them."""
    from ..core.paths import output_path

    output_path(out, "--out", folder=True, reads=shard_dirs)  # never over a shard it reads
    with claimed(out):  # a merge or run still writing --out: refused before anything is read
        return _merge(shard_dirs, out, overwrite, argv, html)


def _merge(shard_dirs: list[Path], out: Path, overwrite: bool, argv: list[str] | None, html: bool) -> Evaluation:
    """merge's work once --out is claimed."""
    shards = [_read_shard(Path(d)) for d in shard_dirs]
    first = shards[0]
    base = {k: v for k, v in first["settings"].items() if k not in ("prompts", "shard")}
    count = first["settings"]["shard"]["count"]
    for shard in shards[1:]:
        other = {k: v for k, v in shard["settings"].items() if k not in ("prompts", "shard")}
        ours, theirs = first["settings"]["shard"], shard["settings"]["shard"]
        extra = [f"shard {k}: {ours.get(k)!r} -> {theirs.get(k)!r}" for k in ("count", "seed") if ours.get(k) != theirs.get(k)]
        if ours.get("all_prompts") != theirs.get("all_prompts"):
            extra.append("the run's prompt list")
        differences = settings_differences(base, other) + extra
        if differences:
            raise InputError(shard["path"], f"is a shard of another run than {first['path']} (differs in: "
                                            + "; ".join(differences) + ")")
    indices = [s["settings"]["shard"]["index"] for s in shards]
    repeated = sorted({i for i in indices if indices.count(i) > 1})
    if repeated:
        raise InputError(None, f"shard {repeated[0]}/{count} is given twice")
    missing = sorted(set(range(count)) - set(indices))
    if missing:
        raise InputError(None, f"shards missing: {', '.join(f'{i}/{count}' for i in missing)} (all {count} are needed)")
    all_prompts = first["settings"]["shard"]["all_prompts"]
    owner: dict[str, Path] = {}
    for shard in shards:
        for pid, _, _ in shard["settings"]["prompts"]:
            if pid in owner:
                raise InputError(shard["path"], f"prompt {pid!r} is also in {owner[pid]}: overlapping shards")
            owner[pid] = shard["path"]
    absent = [pid for pid, _, _ in all_prompts if pid not in owner]
    if absent:
        raise InputError(None, f"prompt {absent[0]!r} is in no shard ({len(absent)} of {len(all_prompts)} missing)")

    order = {pid: i for i, (pid, _, _) in enumerate(all_prompts)}
    run0 = first["run"]
    drafter_order = {d["name"]: i for i, d in enumerate(run0["drafters"])}
    # a single run writes each prompt's rows together, samples in order, drafters in command-line order
    rows = sorted((r for s in shards for r in s["rows"]),
                  key=lambda r: (order[r["prompt_id"]], r.get("sample", 0), drafter_order.get(r["drafter"], 0)))
    prov = copy.deepcopy(run0["provenance"])
    edges = _depth_edges(shards)
    # what the shards ran with, read back from their provenance (core/settings/run_settings.py)
    settings = RunSettings.from_provenance(prov, out=out, seed=first["settings"]["shard"]["seed"], depth_edges=edges)
    entries = [DrafterRecord.from_document(d) for d in run0["drafters"]]
    fingerprints = {d["name"]: d["fingerprint"] for d in run0["drafters"]}
    block_sizes = {d["name"]: d["spec"]["block_size"] for d in run0["drafters"]}
    drafters = drafter_documents(settings, entries, rows, fingerprints, block_sizes,
                                 _step_times(shards, rows, prov["max_new_tokens"]), device=prov.get("device") or "")
    sets: dict[str, int] = {}
    for _, _, prompt_set in all_prompts:
        sets[prompt_set] = sets.get(prompt_set, 0) + 1
    agree, total = self_consistency_of(rows)
    work = {k: sum(s["run"]["provenance"]["work"].get(k, 0) for s in shards) for k in prov["work"]}
    prov.update({
        "argv": argv or ["dflash-eval", "merge", *map(str, shard_dirs)],
        "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "prompts": {**prov["prompts"], "count": len(all_prompts), "sets": sets},
        "self_consistency": {"agree": agree, "total": total},
        "warnings": sorted({w for s in shards for w in s["run"]["provenance"].get("warnings", [])}),
        "work": work, "merged_from": [str(s["path"]) for s in sorted(shards, key=lambda s: s["settings"]["shard"]["index"])],
        "out": str(out),
    })
    if "numerics" in prov:  # the anchors per forward of every shard's sequences, not shard 0's
        prov["numerics"]["anchor_batch"] = merged_anchor_batches(
            [s["run"]["provenance"]["numerics"].get("anchor_batch") for s in shards])
    measured = merge_measured([s["run"]["provenance"].get("numerics", {}).get("measured") for s in shards])
    if measured is not None:  # --numerics-check: every shard's counts, not shard 0's
        prov["numerics"]["measured"] = measured
    if prov.get("responses_agreement"):
        prov["responses_agreement"] = {"agree": agree, "total": total}
    document = {"schema_version": R.SCHEMA_VERSION, "provenance": prov, "drafters": drafters}
    from ..core.explanation import explanation_documents

    explanation = explanation_documents(rows, seed=settings.seed)  # `run --reference`: over every shard's prompts
    if explanation:
        document["explanation"] = explanation
    folder = RunFolder(out, {**base, "prompts": all_prompts})
    folder.open(overwrite)
    try:
        folder.write_rows(rows)
        page = None
        if html:
            from ..render.html import render_run_html

            page = render_run_html(document, rows)
        folder.finish(document, {"report.html": page} if page is not None else None)
    finally:
        folder.close()
    return Evaluation(document, rows)


def _depth_edges(shards: list[dict[str, Any]]) -> list[int] | None:
    """The depth-bucket edges every shard's drafters were split with (one set, or refused by name)."""
    first = None
    for shard in shards:
        for d in shard["run"]["drafters"]:
            if d.get("depth_edges") is None:
                continue
            if first is None:
                first = (shard["path"], d["depth_edges"])
            elif d["depth_edges"] != first[1]:
                raise InputError(shard["path"], f"was split by depth with other --depth-buckets than {first[0]} "
                                                f"(edges {d['depth_edges']} vs {first[1]}); rerun the shards with one "
                                                "--depth-buckets")
    return first[1] if first else None


def _step_times(shards: list[dict[str, Any]], rows: list[dict[str, Any]], max_new_tokens: int) -> dict[str, Any]:
    """drafter name -> the step times its shards' speedup tables were computed with (file or roofline),
    for the table to be recomputed from the merged counts; live-measured ones are rebuilt from the rows."""
    from ..core.speedup import mean_context, recorded_step_times

    lengths = {r["prompt_id"]: int(r["prompt_len"]) for r in rows}
    context = mean_context(lengths.values(), max_new_tokens)  # what one process's roofline used
    recorded: dict[str, tuple[Path, dict[str, Any], Any]] = {}
    for shard in shards:
        for d in shard["run"]["drafters"]:
            table = d.get("speedup")
            if not table or table.get("source") == "measured":
                continue
            key = (table["source"], {k: v for k, v in (table.get("inputs") or {}).items() if k != "context_tokens"})
            if d["name"] not in recorded:
                recorded[d["name"]] = (shard["path"], table, key)
            elif recorded[d["name"]][2] != key:
                raise InputError(shard["path"], f"its expected speedup of {d['name']} was modelled with other step "
                                                f"times than {recorded[d['name']][0]} ({table['label']} vs "
                                                f"{recorded[d['name']][1]['label']}); rerun the shards with one "
                                                "--accelerator or --step-times")
    for shard in shards:  # a shard with steps but no table was run without the option the others had
        for d in shard["run"]["drafters"]:
            if d["name"] in recorded and not d.get("speedup") and (d.get("metrics") or {}).get("steps"):
                raise InputError(shard["path"], f"has no expected speedup of {d['name']} while "
                                                f"{recorded[d['name']][0]} has one; rerun the shards with one "
                                                "--accelerator or --step-times")
    times = {}
    for name, (path, table, _) in recorded.items():
        try:
            times[name] = recorded_step_times(table, context if table["source"] == "roofline" else None)
        except ValueError as exc:
            raise InputError(path, f"cannot recompute the expected speedup of {name}: {exc}; rerun the shard") from None
    return times
