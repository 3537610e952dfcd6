"""The run folder: one object owns its state file, the settings digest, resume, atomic writes and the
message that names what differs. Stages never touch the folder's files directly.

Layout (results.py documents each file): `run_state.json` (settings, their digest, complete flag),
`samples.jsonl` (rows, appended per prompt), `run.partial.json` while unfinished, then `run.json` and
`per_position.csv`.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

from ..core import results as R
from ..core.errors import InputError, read_json_object


def settings_hash(settings: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()


def _describe(value: Any) -> str:
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= 60 else text[:57] + "..."


def settings_differences(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """'name: old -> new' for each setting that differs (prompts by count and first differing id)."""
    out = []
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key), new.get(key)
        if a == b:
            continue
        if key == "prompts" and isinstance(a, list) and isinstance(b, list):
            first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            where = (f"first difference at #{first} ({_describe(a[first][0]) if first < len(a) else 'none'} vs "
                     f"{_describe(b[first][0]) if first < len(b) else 'none'})")
            out.append(f"prompts: {len(a)} -> {len(b)} prompts, {where}")
        else:
            out.append(f"{key}: {_describe(a)} -> {_describe(b)}")
    return out


class RunFolder:
    """`--out`: created fresh, or resumed when it holds an unfinished run with the same settings."""

    def __init__(self, path: Path, settings: dict[str, Any]):
        self.path = Path(path)
        self.settings = settings
        self.digest = settings_hash(settings)

    def open(self, overwrite: bool = False) -> list[dict[str, Any]]:
        """Create, resume or refuse (naming each setting that differs); the rows already written.
        `overwrite` replaces a folder that dflash-eval wrote, never a foreign one."""
        from ..core.paths import writable_dir

        writable_dir(self.path, "--out")
        state_path = self.path / R.STATE
        if state_path.exists() and overwrite:
            shutil.rmtree(self.path)
        elif state_path.exists():
            state = read_json_object(state_path, missing="run state missing")
            if state.get("settings_hash") != self.digest:
                differences = settings_differences(state.get("settings") or {}, self.settings)
                detail = "; ".join(differences) if state.get("settings") else "settings not recorded (older run)"
                raise InputError(self.path, f"already holds a run with different settings ({detail}); rerun with "
                                            "the same settings to resume, --overwrite to replace it, or choose "
                                            "another --out")
            return R.read_samples(self.path / R.SAMPLES)
        if self.path.exists() and any(self.path.iterdir()):
            raise InputError(self.path, "exists and is not a dflash-eval run folder (no run_state.json); choose "
                                        "another --out (--overwrite only replaces folders dflash-eval wrote)")
        self.path.mkdir(parents=True, exist_ok=True)
        self._write_state(complete=False)
        return []

    def keep_complete(self, rows: list[dict[str, Any]], expected: set) -> list[dict[str, Any]]:
        """Keep the rows of prompts every drafter finished (a torn prompt is redone); those rows.
        `expected`: the drafter names, or (name, sample) pairs when each prompt is sampled K times."""
        by_prompt: dict[str, set] = {}
        for row in rows:
            key = row["drafter"] if all(isinstance(e, str) for e in expected) else (row["drafter"], row.get("sample", 0))
            by_prompt.setdefault(row["prompt_id"], set()).add(key)
        complete = {pid for pid, names in by_prompt.items() if names == expected}
        kept = [r for r in rows if r["prompt_id"] in complete]
        R.atomic_write(self.path / R.SAMPLES, "".join(json.dumps(r) + "\n" for r in kept))
        return kept

    def append(self, rows: list[dict[str, Any]]) -> None:
        """One prompt's rows, all drafters at once (resume relies on that)."""
        with (self.path / R.SAMPLES).open("a") as sink:
            sink.write("".join(json.dumps(r) + "\n" for r in rows))
            sink.flush()

    def write_partial(self, document: dict[str, Any], done: int, total: int) -> None:
        R.atomic_write(self.path / R.PARTIAL_JSON,
                       json.dumps({**document, "incomplete": {"done": done, "total": total}}, indent=1) + "\n")

    def finish(self, document: dict[str, Any]) -> None:
        R.atomic_write(self.path / R.RUN_JSON, json.dumps(document, indent=1) + "\n")
        (self.path / R.PARTIAL_JSON).unlink(missing_ok=True)
        R.atomic_write(self.path / R.PER_POSITION, R.per_position_csv(document["drafters"]))
        self._write_state(complete=True)

    def _write_state(self, complete: bool) -> None:
        R.atomic_write(self.path / R.STATE, json.dumps({"settings_hash": self.digest, "complete": complete,
                                                         "settings": self.settings}))
