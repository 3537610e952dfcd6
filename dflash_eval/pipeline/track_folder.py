"""The track folder (`dflash-eval track --out DIR`): one object owns its files, like `RunFolder` owns a run's.

Layout (docs/result-documents.md documents each field, generated from row_documents.TrackRow):
- `track_state.json`: the settings the curve depends on (everything but the checkpoints) and their digest;
  resuming needs equal settings, and a difference is refused by name.
- `track.jsonl`: one row per evaluated checkpoint and one for the reference; append-only, so rows of
  checkpoints a trainer's save limit deleted stay.
- `track_log.jsonl`: what the polls saw: checkpoints skipped (incomplete, still changing, invalid) and each
  batch with its target passes.
- `runs/<label>/`: each checkpoint's own run folder, exactly what `dflash-eval run` writes for that
  checkpoint alone, so `report`, `show` and `diff` work on any point of the curve.
- `track.csv`, `track.html`: rewritten after every batch.
- `written.json`, `track.lock`: the files dflash-eval wrote (all `--overwrite` removes) and the lock one
  tracker holds while it runs (a second tracker on the same folder is refused).
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, TypedDict, cast

from ..core.documents import results as R
from ..core.documents.row_documents import TrackRow
from ..core.documents.run_document import DrafterDocument, DraftLengthEntry, Part, TreeBudgetEntry, TreeDocument
from ..core.errors import InputError, read_json_object
from ..core.snapshots import drafter_architecture
from .run_folder import held_lock, record_written, remove_written, settings_differences, settings_hash

STATE = "track_state.json"
ROWS = "track.jsonl"
LOG = "track_log.jsonl"
RUNS = "runs"
CSV = "track.csv"
HTML = "track.html"
LOCK = "track.lock"
TRACK_LOCK = LOCK  # (the name other modules import: run_folder has its own LOCK)


def now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def run_label(role: str, name: str, step: int | None, fingerprint: str) -> str:
    """A run folder name that is unique per checkpoint content (one path can hold several checkpoints over
    time) and sorts by step."""
    if role == "reference":
        return f"reference-{fingerprint[:12]}"
    stem = f"step-{step:09d}" if step is not None else re.sub(r"[^A-Za-z0-9._-]+", "_", name)[:60]
    return f"{stem}-{fingerprint[:12]}"


class TrackFolder:
    def __init__(self, path: Path, settings: dict[str, Any]):
        self.path = Path(path)
        self.settings = settings
        self.digest = settings_hash(settings)
        self.lock = held_lock(self.path, LOCK)  # the one `track` claimed at its start

    def open(self, overwrite: bool = False) -> list[TrackRow]:
        """Create, resume (same settings) or refuse naming what differs; the rows already written. The folder
        stays locked until `close` (or the process ends)."""
        from ..core.paths import output_path

        output_path(self.path, "--out", folder=True)
        state_path = self.path / STATE
        if state_path.exists():
            self.lock.acquire()
            try:
                state = read_json_object(state_path, missing="track state missing")
                if overwrite:
                    remove_written(self.path, keep=(LOCK,))
                elif state.get("settings_hash") != self.digest:
                    written = state.get("settings")
                    recorded: dict[str, Any] = written if isinstance(written, dict) else {}
                    detail = "; ".join(settings_differences(recorded, self.settings))
                    raise InputError(self.path, f"already holds a track with different settings ({detail}); rerun "
                                                "with the same settings to continue it, --overwrite to replace it, "
                                                "or choose another --out")
                else:
                    return self.rows()
            except BaseException:
                self.lock.release()
                raise
        elif self.path.exists() and any(p.name not in (LOCK, "written.json") for p in self.path.iterdir()):
            raise InputError(self.path, "exists and is not a dflash-eval track folder (no track_state.json); choose "
                                        "another --out (--overwrite only replaces folders dflash-eval wrote)")
        else:
            try:
                self.path.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise InputError(self.path, f"cannot create the folder: {exc.strerror or exc}") from None
            self.lock.acquire()
        (self.path / RUNS).mkdir(parents=True, exist_ok=True)
        record_written(self.path, LOCK, RUNS, STATE, CSV, HTML)
        R.atomic_write(state_path, json.dumps({"settings_hash": self.digest, "settings": self.settings}))
        return []

    def close(self) -> None:
        self.lock.release()

    def rows(self) -> list[TrackRow]:
        return read_rows(self.path)

    def append(self, row: TrackRow) -> None:
        record_written(self.path, ROWS)
        R.append_text(self.path / ROWS, json.dumps(row) + "\n")

    def log(self, event: str, **fields: Any) -> None:
        record_written(self.path, LOG)
        R.append_text(self.path / LOG, json.dumps({"time": now(), "event": event, **fields}) + "\n")

    def run_dir(self, label: str) -> Path:
        record_written(self.path, f"{RUNS}/{label}")
        return self.path / RUNS / label


def read_rows(directory: Path) -> list[TrackRow]:
    """track.jsonl's rows, each checked (core/invariants.check_track_row); a torn last line (killed
    mid-write) is dropped (that checkpoint is redone)."""
    from ..core.documents.invariants import check_track_row

    # read_samples has checked every row against TrackRow (check_json): the cast is that check
    rows = cast(list[TrackRow], R.read_samples(Path(directory) / ROWS, torn_tail="drop", row_type=TrackRow))
    for number, row in enumerate(rows, 1):
        check_track_row(row, Path(directory) / ROWS, number)
    return rows


def read_log(directory: Path) -> list[dict[str, Any]]:
    return R.read_samples(Path(directory) / LOG, torn_tail="drop")


class TrackExtras(TypedDict, total=False):
    """The parts of a TrackRow only some runs have (its estimate, its breakdowns), in the row's key order."""

    estimate: dict[str, Any]
    by_draft_length: list[DraftLengthEntry]
    depth_edges: list[int]
    by_depth: list[Part]
    tree: TreeDocument


def track_row(role: Literal["checkpoint", "reference"], entry, fingerprint: str, label: str, drafter: DrafterDocument, *, step: int | None,
              step_source: str, identity) -> TrackRow:
    """One checkpoint's row, from the drafter object of its run folder's run.json (the same numbers)."""
    repetition: Mapping[str, Any] = drafter.get("repetition") or {}
    found = drafter.get("estimate")
    estimate: TrackExtras = {"estimate": found} if found else {}
    return {
        "role": role, "name": entry.name, "path": str(entry.path), "step": step, "step_source": step_source,
        "fingerprint": fingerprint, "identity": [list(f) for f in identity], "run": f"{RUNS}/{label}",
        # which HF snapshot (if any) and which shape: a repository name alone can hold two (core/snapshots.py)
        "snapshot": drafter.get("snapshot"), "architecture": drafter_architecture(drafter["spec"]),
        "format": entry.spec.format, "block_size": entry.spec.block_size, "metrics": drafter["metrics"],
        "repetition_share": repetition.get("flagged_share"),
        "tau_macro_without_flagged_prompts": repetition.get("tau_macro_without_flagged_prompts"),
        "counts": drafter["counts"], **estimate, **breakdown_fields(drafter), "evaluated_at": now(),
    }


def breakdown_fields(drafter: DrafterDocument) -> TrackExtras:
    """What the curve shows beyond the totals, copied from the run folder's drafter object (the same
    numbers): `by_draft_length` (--draft-lengths: tau at every k, each its own replay), `tree` (--tree-budgets)
    and `depth_edges` /
    `by_depth` (the latest checkpoint by context depth); absent where the run has none."""
    out: TrackExtras = {}
    if drafter.get("by_draft_length"):
        out["by_draft_length"] = drafter["by_draft_length"]
    if drafter.get("depth_edges"):
        out["depth_edges"] = drafter["depth_edges"]
    if drafter.get("by_depth"):
        out["by_depth"] = drafter["by_depth"]
    if drafter.get("tree"):
        out["tree"] = drafter["tree"]
    return out


def _tree_budgets(row: TrackRow) -> list[TreeBudgetEntry]:
    """A row's tree walks per budget (--tree-budgets); none without a tree."""
    tree = row.get("tree")
    return (tree.get("by_budget") or []) if tree else []


def track_csv(rows: list[TrackRow]) -> str:
    """per_position.csv's columns, one row per checkpoint, with the step and identity in front."""
    import csv
    import io

    from ..core.safe_text import printable

    body = R.per_position_csv([{"name": r["name"], "metrics": r["metrics"]} for r in rows])
    lines = body.splitlines()
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    parsed = list(csv.reader(lines))
    ks = sorted({e["k"] for r in rows for e in r.get("by_draft_length") or []})  # --draft-lengths: tau at each k
    budgets = sorted({e["budget"] for r in rows for e in _tree_budgets(r)})  # trees
    writer.writerow(["role", "step", "tau_macro_ci_low", "tau_macro_ci_high", "repetition_share", "fingerprint",
                     "path", *parsed[0], *(f"tau_macro_at_k_{k}" for k in ks),
                     *(f"tau_macro_at_tree_{b}" for b in budgets)])
    for row, cells in zip(rows, parsed[1:]):
        ci: Sequence[float | None] = row["metrics"].get("tau_macro_ci") or [None, None]
        at_k = {e["k"]: e["metrics"].get("tau_macro") for e in row.get("by_draft_length") or []}
        at_b = {e["budget"]: e["metrics"].get("tau_macro") for e in _tree_budgets(row)}
        writer.writerow([row["role"], "" if row["step"] is None else row["step"],
                         *("" if v is None else f"{v:.6f}" for v in ci),
                         "" if row.get("repetition_share") is None else f"{row['repetition_share']:.6f}",
                         printable(row["fingerprint"]), printable(row["path"]), *cells,
                         *("" if at_k.get(k) is None else f"{at_k[k]:.6f}" for k in ks),
                         *("" if at_b.get(b) is None else f"{at_b[b]:.6f}" for b in budgets)])
    return out.getvalue()
