"""`dflash_eval.read_run(DIR)`: a run folder as pandas DataFrames, for slicing results in a notebook.

Counts come with every ratio (store counts, divide when showing), so a filtered or grouped frame can be
re-divided exactly: e.g. tau over a subset of prompts is `committed.sum() / steps.sum()` (micro) or the
mean of `tau` (macro), exactly as the run computes them.

    frames = dflash_eval.read_run("runs/epoch3")
    frames.prompts.pivot(index="prompt_id", columns="drafter", values="tau")
    frames.slots.query("drafter == 'epoch3'")[["slot", "reach", "reach_count", "steps"]]
    frames.blocks[frames.blocks.repetition_flags.str.len() > 0]
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from ..core import metrics as M
from ..core.documents import results as R
from ..core.documents.row_documents import SampleRow
from ..core.documents.run_document import RunDocument
from ..core.documents.run_rows import run_rows


@dataclass
class RunFrames:
    run: RunDocument  # run.json as written (provenance, specs, metrics)
    drafters: pd.DataFrame  # one row per drafter: tau macro/micro, interval, steps, format, semantics
    prompts: pd.DataFrame  # one row per (prompt, drafter): steps, committed, tau, accepted/drafted tokens
    slots: pd.DataFrame  # one row per (drafter, slot): reach / conditional / marginal with their counts
    blocks: pd.DataFrame  # one row per walk step: anchor, committed, accepted, drafted, flags, draft ids


def read_run(directory: str | Path, *, partial: bool = False) -> RunFrames:
    directory = Path(directory)
    run = R.read_run_document(directory, partial=partial)
    rows = run_rows(directory, run)  # duplicated, missing or torn rows refused by name
    return RunFrames(run, _drafters(run), _prompts(rows), _slots(run), _blocks(rows))


def _drafters(run: RunDocument) -> pd.DataFrame:
    records = []
    for d in run["drafters"]:
        m, ci = d["metrics"], d["metrics"].get("tau_macro_ci") or [None, None]
        counts = d.get("counts") or {}  # none for an offline estimate (temperature > 0): `estimate` says so
        records.append({"drafter": d["name"], "format": d["format"], "semantics": d["spec"].get("semantics"),
                        "block_size": d["spec"]["block_size"], "estimate": bool(m.get("estimate")),
                        "tau_macro": m["tau_macro"], "tau_macro_low": ci[0],
                        "tau_macro_high": ci[1], "tau_micro": m["tau_micro"], "steps": m.get("steps"),
                        "accepted_draft_tokens": counts.get("accepted_draft_tokens"),
                        "drafted_tokens": counts.get("drafted_tokens")})
    return pd.DataFrame.from_records(records)


def _prompts(rows: list[SampleRow]) -> pd.DataFrame:
    records = []
    for r in rows:
        if r.get("counts") is None:  # an offline estimate's row: expected steps and committed tokens
            steps, committed = r["estimate"]["per_prompt"].get(r["prompt_id"], [0, 0])
            records.append({"prompt_id": r["prompt_id"], "prompt_set": r["prompt_set"], "drafter": r["drafter"],
                            "sample": r.get("sample"), "prompt_len": r["prompt_len"],
                            "continuation_len": r["continuation_len"], "steps": steps, "committed": committed,
                            "tau": committed / steps if steps else None, "estimate": True})
            continue
        counts = r["counts"]
        steps, committed = counts["per_prompt"].get(r["prompt_id"], [0, 0])
        rep = r.get("repetition") or {}
        records.append({"prompt_id": r["prompt_id"], "prompt_set": r["prompt_set"], "drafter": r["drafter"],
                        "prompt_len": r["prompt_len"], "continuation_len": r["continuation_len"], "steps": steps,
                        "committed": committed, "tau": committed / steps if steps else None,
                        "accepted_draft_tokens": counts["accepted_draft_tokens"],
                        "drafted_tokens": counts["drafted_tokens"], "flagged_blocks": rep.get("flagged_blocks"),
                        "blocks": rep.get("blocks")})
    return pd.DataFrame.from_records(records)


def _slots(run: RunDocument) -> pd.DataFrame:
    records = []
    for d in run["drafters"]:
        if d.get("counts") is None:  # an offline estimate: alpha and expected reach per slot
            m = d["metrics"]
            records += [{"drafter": d["name"], "slot": i + 1, "alpha": a, "expected_reach": r, "estimate": True}
                        for i, (a, r) in enumerate(zip(m["alpha"], m["expected_reach"]))]
            continue
        counts = M.AcceptanceCounts.from_dict(d["counts"])
        fractions = M.slot_fractions(counts)
        for i in range(counts.block_size - 1):
            record: dict[str, Any] = {"drafter": d["name"], "slot": i + 1}
            for key, (numerator, denominator) in (("reach", ("reach_count", "steps")),
                                                  ("conditional", ("reach_count", "reached_previous")),
                                                  ("marginal", ("marginal_correct", "marginal_total"))):
                num, den = fractions[key][i]
                record[numerator], record[denominator] = num, den
                record[key] = num / den if den else None
            records.append(record)
    return pd.DataFrame.from_records(records)


def _blocks(rows: list[SampleRow]) -> pd.DataFrame:
    records = []
    for r in rows:
        if "walk_anchors" not in r:  # an offline estimate has no walk
            continue
        flags = r.get("walk_flags") or [[] for _ in r["walk_anchors"]]
        for step, (anchor, committed, drafted, draft, flag) in enumerate(zip(
                r["walk_anchors"], r["walk_accept_lengths"], r["walk_drafted"], r["walk_drafts"], flags)):
            records.append({"prompt_id": r["prompt_id"], "drafter": r["drafter"], "step": step, "anchor": anchor,
                            "committed": committed, "accepted": committed - 1, "drafted": drafted,
                            "draft_ids": list(draft), "repetition_flags": list(flag)})
    return pd.DataFrame.from_records(records)


def read_track(directory: str | Path) -> pd.DataFrame:
    """A track folder's track.jsonl as one row per checkpoint (and the reference): step, tau with its
    interval, repetition share, and reach per slot as `reach_1 .. reach_{B-1}` with the counts behind them.

        curve = dflash_eval.read_track("track")
        curve.query("role == 'checkpoint'").plot(x="step", y="tau_macro")
    """
    from ..core.errors import InputError, regular_file_present
    from ..pipeline.track_folder import ROWS, read_rows

    directory = Path(directory)
    if not regular_file_present(directory / ROWS):
        raise InputError(directory, "not a dflash-eval track folder (no track.jsonl)")
    records = []
    for row in read_rows(directory):
        m, ci = row["metrics"], row["metrics"].get("tau_macro_ci") or [None, None]
        record = {"role": row["role"], "step": row.get("step"), "name": row["name"], "path": row["path"],
                  "fingerprint": row["fingerprint"], "run": row["run"], "tau_macro": m["tau_macro"],
                  "tau_macro_low": ci[0], "tau_macro_high": ci[1], "tau_micro": m["tau_micro"],
                  "steps": m.get("steps"), "repetition_share": row.get("repetition_share"),
                  "evaluated_at": row.get("evaluated_at")}
        for i, value in enumerate(m.get("reach") or [], 1):
            record[f"reach_{i}"] = value
        records.append(record)
    return pd.DataFrame.from_records(records)
