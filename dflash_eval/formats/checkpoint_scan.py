"""A training run's save folder as a list of checkpoints: which folders are checkpoints, what step each
one is, and whether each is complete yet. File inspection only: no torch, no weights loaded.

Layouts, as the trainers write them (read from their code):
- speculators 0.9 (`speculators/train/checkpointer.py`, `trainer.py`): `<save_path>/<epoch>/` with
  config.json, model.safetensors, optimizer/scheduler state and `training_state.json`
  {"epoch", "local_step", "global_step"}, written *after* the weights. A mid-epoch save rewrites the same
  `<epoch>/` folder, so one path can hold several checkpoints over time: identity is the content, never
  the path. Symlinks `checkpoint_best -> <epoch>` and `epoch<E>_step<S>` / `epoch<E>_end -> <epoch>` are
  names for folders already listed; `interrupted/` is a save made on a signal.
- SpecForge (`scripts/train_dflash.py`): `<output_dir>/epoch_<E>_step_<S>/` with config.json,
  model.safetensors and `training_state.pt`. That file is a pickle and is never opened: the step comes
  from the folder name.
- HF Trainer: `checkpoint-<N>/` with `trainer_state.json` {"global_step": N, ...}.
- Any folder whose subfolders hold config.json, or checkpoint folders named one by one.

A checkpoint is *complete* when config.json parses, every weight file is present (the shards an index
lists) and every safetensors file holds all the bytes its header promises. Whether it is still being
written is judged by the caller from two snapshots (`Found.files`) taken a poll apart.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from ..core.errors import InputError, loads, read_text
from .files import CONFIG_NAME, read_safetensors_header, weight_files

# Folder names that are checkpoints by the trainers' conventions: reported while still empty or
# half-written, where any other folder without a config.json is simply not a checkpoint.
_NAMED = [
    (re.compile(r"^checkpoint-(\d+)$"), "folder name checkpoint-N"),
    (re.compile(r"^epoch_\d+_step_(\d+)$"), "folder name epoch_E_step_S (SpecForge)"),
    (re.compile(r"^(?:global_)?step[-_]?(\d+)$"), "folder name step-N"),
    (re.compile(r"^(\d+)$"), "epoch number (speculators folder without training_state.json)"),
]
_BEST_LINKS = ("checkpoint_best", "best")  # speculators' name, and the common short one
_SKIP = {"interrupted"}  # speculators' signal-time save: not part of the curve (rename it to an epoch to keep it)


@dataclass(frozen=True)
class Found:
    """One checkpoint folder as seen by one scan."""

    path: Path
    name: str  # folder name (the drafter's name in its run folder, as `run` would call it)
    step: int | None
    step_source: str
    files: tuple[tuple[str, int, int], ...]  # (name, size, mtime_ns) of every regular file: the snapshot

    @cached_property
    def problem(self) -> str | None:
        """None when complete; else why not (yet). Read only when asked: a poll never re-reads the headers
        of checkpoints it has already evaluated."""
        return completeness_problem(self.path)

    @property
    def identity(self) -> tuple[tuple[str, int, int], ...]:
        """The snapshot of what evaluation reads (config and weights): equal means the same checkpoint
        without hashing it again."""
        return tuple(f for f in self.files if f[0] == CONFIG_NAME or f[0].endswith((".safetensors", ".index.json")))

    def order(self) -> tuple:
        newest = max((f[2] for f in self.files), default=0)
        return (self.step is None, self.step if self.step is not None else 0, newest, self.name)


@dataclass(frozen=True)
class Scan:
    checkpoints: list[Found]  # ordered by step (unknown steps last, by modification time)
    best: dict[str, str]  # link name -> folder name it points to (speculators' checkpoint_best)


def _snapshot(folder: Path) -> tuple[tuple[str, int, int], ...]:
    out = []
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError:
        return ()
    for entry in entries:
        try:
            if entry.is_file(follow_symlinks=False):
                stat = entry.stat(follow_symlinks=False)
                out.append((entry.name, stat.st_size, stat.st_mtime_ns))
        except OSError:
            continue  # deleted between listing and stat: the next poll sees the new state
    return tuple(out)


def _state_step(folder: Path) -> tuple[int | None, str]:
    """global_step from a trainer's JSON state file, when one is there and readable."""
    for name in ("training_state.json", "trainer_state.json"):
        try:
            data = loads(read_text(folder / name))
        except (OSError, ValueError):  # (UnicodeDecodeError and a key given twice are ValueErrors)
            continue
        step = data.get("global_step") if isinstance(data, dict) else None
        if isinstance(step, int) and not isinstance(step, bool) and step >= 0:
            return step, f"{name} global_step"
    return None, ""


def _name_step(name: str) -> tuple[int | None, str]:
    for pattern, source in _NAMED:
        match = pattern.match(name)
        if match:
            return int(match.group(1)), source
    return None, "unknown (ordered by modification time)"


def completeness_problem(folder: Path) -> str | None:
    """Why `folder` is not a complete checkpoint yet, or None."""
    from ..core.errors import ABSENT, file_kind

    config = folder / CONFIG_NAME
    kind = file_kind(config)
    if kind == ABSENT:
        return "no config.json yet"
    if kind is not None:  # a FIFO or a link loop never becomes a checkpoint: said, not waited on as "not yet"
        return f"config.json is {kind}, not a regular file"
    try:
        data = loads(read_text(config))
    except (OSError, ValueError):
        return "config.json is not valid JSON yet (still being written?)"
    if not isinstance(data, dict):
        return "config.json is not a JSON object"
    try:
        for file in weight_files(folder):
            read_safetensors_header(file)
    except InputError as exc:
        return exc.problem if exc.path in (None, str(folder)) else f"{Path(exc.path).name}: {exc.problem}"
    return None


def describe(folder: Path, name: str | None = None) -> Found:
    step, source = _state_step(folder)
    if step is None:
        step, source = _name_step(folder.name)
    return Found(folder, name or folder.name, step, source, _snapshot(folder))


def _looks_like_checkpoint(folder: Path) -> bool:
    if (folder / CONFIG_NAME).exists() or any(folder.glob("*.safetensors")):
        return True
    return any(pattern.match(folder.name) for pattern, _ in _NAMED)


def scan(sources: list[Path]) -> Scan:
    """Every checkpoint under `sources`: a source that is itself a checkpoint is taken as one; otherwise its
    subfolders that are (symlinks are names for folders already listed and are skipped)."""
    found: dict[Path, Found] = {}
    best: dict[str, str] = {}
    for source in sources:
        source = Path(source)
        if (source / CONFIG_NAME).exists() or any(source.glob("*.safetensors")):
            found.setdefault(source.absolute(), describe(source))
            continue
        try:
            children = sorted(source.iterdir())
        except OSError:
            continue  # the caller checked the sources exist; a folder removed since is simply empty
        for child in children:
            if child.is_symlink():
                if child.name in _BEST_LINKS:
                    try:
                        best[child.name] = Path(os.readlink(child)).name
                    except OSError:
                        pass
                continue
            if not child.is_dir() or child.name.startswith(".") or child.name in _SKIP:
                continue
            if _looks_like_checkpoint(child):
                found.setdefault(child.absolute(), describe(child))
    return Scan(sorted(found.values(), key=Found.order), best)
