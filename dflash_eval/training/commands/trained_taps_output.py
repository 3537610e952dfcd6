"""trained-taps --out DIR: everything the command computed, written by the library as a run folder that
`diff`, `report` and `show` read: trained_taps.json (the comparison), and with a drafter run.json,
samples.jsonl and per_position.csv holding two drafters, NAME@trained-taps (the stored fc input and labels)
and NAME@our-taps (the taps dflash-eval computes, the target's greedy labels), over the same samples; plus
trained_taps.html. The folder is checked before any model loads (a foreign folder, or one holding other
settings without --overwrite, is refused by name) and held under the run folder's lock while written.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

TRAINED_TAPS_JSON = "trained_taps.json"
TRAINED_TAPS_HTML = "trained_taps.html"


def settings_of(taps, settings) -> dict[str, Any]:
    """What the numbers depend on (the run folder's settings digest): a folder made with others is refused."""
    return {"command": "trained-taps", "data": str(Path(taps.data).resolve()), "target": taps.target,
            "drafter": taps.drafter, "limit": taps.limit, "split": taps.split,
            "train_ratio": taps.train_ratio, "layer_ids": list(taps.layers) if taps.layers else None,
            "noise_samples": taps.noise_samples, "dtype": taps.dtype, "seed": taps.seed}


def check_out(out: Path, taps, settings, overwrite: bool):
    """The output folder, refused now (before anything loads) if it may not be written: a RunFolder with a
    drafter (a run folder), else the folder itself, which may hold only files dflash-eval wrote there."""
    from ...core.errors import InputError
    from ...core.paths import output_path
    from ...pipeline.run_folder import LOCK, WRITTEN, RunFolder, written_files

    out = Path(out)
    if taps.drafter:
        folder = RunFolder(out, settings_of(taps, settings))
        folder.check(overwrite)
        return folder
    output_path(out, "--out", folder=True, reads=[taps.data])  # the one output guard (core/paths.py)
    ours = set(written_files(out) or []) | {WRITTEN, LOCK}  # the lock the command holds (cli/common.claims_out)
    foreign = sorted(p.name for p in out.iterdir() if p.name not in ours) if out.is_dir() else []
    if foreign:
        raise InputError(out, f"exists and holds files dflash-eval did not write there ({foreign[0]}, ...); choose "
                              "another --out")
    return out


def run_document(result: dict, rows: list[dict], taps, settings, target, entry, drafter) -> dict[str, Any]:
    """run.json for the evaluation rows: `run`'s document (pipeline/document.assemble) over the two sides, its
    provenance saying where the continuations came from (the training data) and how they were scored."""
    from ...core.settings.run_settings import RunOptions
    from ...formats.files import checkpoint_fingerprint, target_content
    from ...model.kernels import kernel_report, kernel_summary
    from ...pipeline.document import assemble
    from ...pipeline.inputs import DrafterEntry
    from ...pipeline.prompts import Prompt

    names = {"trained": f"{entry.name}@trained-taps", "ours": f"{entry.name}@our-taps"}
    entries = [DrafterEntry(names[side], entry.path, entry.spec) for side in ("trained", "ours")]
    order: dict[str, Prompt] = {}
    for row in rows:
        order.setdefault(row["prompt_id"], Prompt(row["prompt_id"], "", row["prompt_set"]))
    longest = max((row["continuation_len"] for row in rows), default=1)
    run_options = RunOptions(drafters=[str(entry.path)], out=Path("."), target=taps.target,
                             prompts=f"trained-taps:{result['data']}", max_new_tokens=longest, final_block="full",
                             anchor_batch=settings.batching.anchor_batch, seed=taps.seed,
                             device=settings.placement.device, dtype=taps.dtype, argv=settings.output.argv)
    fingerprint = checkpoint_fingerprint(entry.path)
    document = assemble(run_options, target, entries, {e.name: drafter for e in entries}, rows, list(order.values()),
                        None, [], {e.name: fingerprint for e in entries}, kernel_summary(kernel_report(target.model)),
                        {e.name: entry.spec.block_size for e in entries}, generated_count=0,
                        evaluated_count=result["samples"]["compared"],
                        content=target_content(target.path, None, target.tokenizer.chat_template))
    prov = document["provenance"]
    prov.update(continuations=f"training data: {result['data']} ({result['format']})", enable_thinking=None,
                thinking_source="not applicable: the texts are the training data's",
                trained_taps={"data": result["data"], "format": result["format"], "split": result["split"],
                              "labels": result["greedy"]["labels"], "anchors": "loss_mask == 1",
                              "final_block": "full (training blocks)", "verdict": result["verdict"]})
    return document


def write_outputs(folder, result: dict, rows: list[dict], taps, settings, target, entry, drafter) -> list[Path]:
    """trained_taps.json, trained_taps.html and, with a drafter, the run folder's files (recorded in
    written.json, each replaced atomically); the paths written."""
    from ...core.documents.results import atomic_write
    from ...pipeline.run_folder import RunFolder, record_written, write_run_html
    from ..views.trained_taps_page import render_trained_taps_html

    if not isinstance(folder, RunFolder):
        Path(folder).mkdir(parents=True, exist_ok=True)
        record_written(folder, TRAINED_TAPS_JSON)
        atomic_write(Path(folder) / TRAINED_TAPS_JSON, json.dumps(result, indent=1) + "\n")
        page = write_run_html(Path(folder), render_trained_taps_html(result), TRAINED_TAPS_HTML)
        return [Path(folder) / TRAINED_TAPS_JSON, page]
    folder.open(overwrite=True)  # check_out refused what may not be replaced; same settings: computed again
    try:
        out = folder.path
        record_written(out, TRAINED_TAPS_JSON)
        atomic_write(out / TRAINED_TAPS_JSON, json.dumps(result, indent=1) + "\n")
        folder.write_rows(rows)
        folder.finish(run_document(result, rows, taps, settings, target, entry, drafter))
        page = write_run_html(out, render_trained_taps_html(result), TRAINED_TAPS_HTML)
        return [out / TRAINED_TAPS_JSON, out / "run.json", out / "samples.jsonl", out / "per_position.csv", page]
    finally:
        folder.close()
