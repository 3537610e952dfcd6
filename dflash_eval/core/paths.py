"""Every path the tool writes, checked before any work starts: one line naming the path and the problem.

Why up front: a run can take hours; finding out at the end that `--html` names a folder, or that `--out`
sits on a read-only or special filesystem, loses the run (or, worse, prints a traceback over it).

`output_path` is the one guard every output option of every command goes through (`--html`, `--out`,
`--tensorboard`): besides being writable, an output never lands on a file of a result folder (`diff A B
--html-file RUN/run.json` overwrote the run and exited 0) nor on one of the command's own inputs (`served B A
--html-file A`, `merge S0 S1 --out S0`). A result folder is one dflash-eval wrote (`written.json`, or the state
file of a run or a track); its files are the names it lists and every name such a folder holds
(`RESULT_FILES`), and what it lists includes the run folders a track keeps under runs/.
"""

from __future__ import annotations

import os
from pathlib import Path

from .errors import InputError

# every name a result folder holds (docs/result-documents.md documents them): never the output of another command
RESULT_FILES = ("run_state.json", "samples.jsonl", "run.partial.json", "run.json", "per_position.csv", "report.html",
                "doctor.json", "written.json", "run.lock", "track_state.json", "track.jsonl", "track_log.jsonl",
                "track.csv", "track.html", "track.lock", "trained_taps.json", "trained_taps.html",
                "engines.json")
RESULT_MARKERS = ("written.json", "run_state.json", "track_state.json")  # a folder holding one is a result folder
SPECIAL_ROOTS = (Path("/proc"), Path("/sys"), Path("/dev"))


def _nearest_existing(path: Path) -> Path:
    current = path
    while not current.exists() and current != current.parent:
        current = current.parent
    return current


def _check_place(path: Path, what: str) -> None:
    resolved = path.expanduser().absolute()
    for root in SPECIAL_ROOTS:
        if resolved == root or root in resolved.parents:
            raise InputError(path, f"is on the special filesystem {root}; choose a normal folder for {what}")
    if resolved.is_symlink() and not resolved.exists():
        raise InputError(path, f"is a symbolic link to {os.readlink(resolved)}, which does not exist; remove the "
                               f"link or point it at a folder for {what}")
    for above in resolved.parents:  # a file where a folder must be: "File exists" later, named here instead
        if above.is_symlink() and not above.exists():
            raise InputError(path, f"cannot be created: {above} is a dangling symbolic link")
        if above.exists():
            break
    parent = _nearest_existing(resolved if resolved.is_dir() else resolved.parent)
    if not parent.is_dir():
        raise InputError(path, f"cannot be created: {parent} is a file, not a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise InputError(path, f"is not writable ({parent} does not allow writing) for {what}")


def writable_dir(path: Path, what: str) -> Path:
    """A folder we may create or write into."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise InputError(path, f"exists and is not a folder; {what} must be a folder")
    _check_place(path, what)
    return path


def writable_file(path: Path, what: str) -> Path:
    """A file we may create or replace (never a folder)."""
    path = Path(path)
    if path.is_dir():
        raise InputError(path, f"is a folder; {what} must be a file path (e.g. {path / 'report.html'})")
    if path.exists() and not path.is_file():
        raise InputError(path, f"exists and is not a regular file; {what} must be a file path")
    if path.exists() and not os.access(path, os.W_OK):
        raise InputError(path, f"exists and is not writable ({what})")
    _check_place(path, what)
    return path


def _listed(folder: Path) -> set[str]:
    """What a result folder's written.json lists (names relative to it); unreadable: nothing listed."""
    import json

    try:
        data = json.loads((folder / "written.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return set()
    return {n for n in data if isinstance(n, str)} if isinstance(data, list) else set()


def result_owner(path: Path) -> tuple[Path, str] | None:
    """(result folder, what `path` is in it) when `path`, as written or with its links resolved, is a file or
    folder of a dflash-eval result folder above it; else None."""
    seen = []
    for candidate in (Path(os.path.abspath(path.expanduser())), path.expanduser().resolve()):
        if candidate in seen:
            continue
        seen.append(candidate)
        for folder in candidate.parents:
            if not any((folder / marker).is_file() for marker in RESULT_MARKERS):
                continue
            inside = candidate.relative_to(folder).as_posix()
            if inside in _listed(folder) or (candidate.parent == folder and candidate.name in RESULT_FILES):
                return folder, inside
    return None


def output_path(path: Path, what: str, *, folder: bool = False, reads=()) -> Path:
    """The guard of every output option: `path` is writable (a folder when `folder`, else a file), is no file or
    folder of a result folder (`result_owner`), and is none of `reads` (the command's inputs: files or
    folders). One InputError naming the option and the path otherwise."""
    path = Path(path)
    (writable_dir if folder else writable_file)(path, what)
    owner = result_owner(path)
    if owner is not None:
        raise InputError(path, f"is {owner[1]} of the dflash-eval result folder {owner[0]}; {what} never writes over "
                               "a result: choose a path outside it (or a new name)")
    mine = Path(os.path.abspath(path.expanduser()))
    for source in reads:
        source = Path(source)
        same = mine == Path(os.path.abspath(source.expanduser()))
        if not same and path.exists() and source.exists():
            try:
                same = os.path.samefile(path, source)
            except OSError:
                same = False
        if same:
            raise InputError(path, f"is also an input of this command ({source}); {what} must not overwrite what "
                                   "it reads: choose another path")
    return path

