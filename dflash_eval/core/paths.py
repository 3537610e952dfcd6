"""Every path the tool writes, checked before any work starts: one line naming the path and the problem.

Why up front: a run can take hours; finding out at the end that `--html` names a folder, or that `--out`
sits on a read-only or special filesystem, loses the run (or, worse, prints a traceback over it).
"""

from __future__ import annotations

import os
from pathlib import Path

from .errors import InputError

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
