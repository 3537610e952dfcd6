"""The one exception type users see, and the readers that raise it (a JSON document, a regular file).

Every problem caused by input (a checkpoint, a config, a prompts file, a target) is raised as
`InputError(path, problem)`. The CLI prints it as a single line, `error: PATH: PROBLEM`, and exits with
code 2, without a traceback: the user needs to know which file is wrong and why, not where in our code
we noticed.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

EXIT_BAD_INPUT = 2


class InputError(Exception):
    """A problem with something the user gave us, tied to the file or name it came from."""

    def __init__(self, path: str | Path | None, problem: str):
        self.path = str(path) if path is not None else None
        self.problem = " ".join(problem.split())  # always one line
        super().__init__(self.one_line())

    def one_line(self) -> str:
        return f"{self.path}: {self.problem}" if self.path else self.problem


def nonfinite_error(where, bad: list[str]) -> InputError:
    """The refusal of weights holding NaN or infinite values (`bad`: tensor names, first named), whether found
    on a loaded model or on the raw bits of its files."""
    return InputError(where, f"tensor {bad[0]!r} holds NaN or infinite values"
                             + (f" (and {len(bad) - 1} more tensors)" if len(bad) > 1 else "")
                             + "; the weights are damaged or diverged")


class DuplicateKey(ValueError):
    """A JSON object that names one key twice."""


def _unique_keys(pairs: list) -> dict:
    """An object's keys, each once: `{"id": "a", "id": "b"}` is refused, never read as its last value."""
    out = {}
    for key, value in pairs:
        if key in out:
            raise DuplicateKey(f"the key {key!r} appears twice in one object (which value is meant?)")
        out[key] = value
    return out


def loads(text: str):
    """`json.loads`, with every way it can fail as a ValueError whose message is one readable phrase:
    invalid JSON (with the column), nesting too deep for the parser, an integer too long to convert, a key
    given twice in one object (the standard library keeps the last: an ambiguity, refused)."""
    import json

    try:
        value = json.loads(text, object_pairs_hook=_unique_keys)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except DuplicateKey:
        raise
    except ValueError as exc:  # e.g. "Exceeds the limit (4300 digits) for integer string conversion"
        raise ValueError(f"a number JSON cannot hold ({str(exc).split(';')[0]})") from None
    except RecursionError:
        raise ValueError("nested too deeply") from None
    # `\ud800` alone parses (JSON's grammar allows it) into text that is not Unicode: a tokenizer, a terminal
    # or a UTF-8 file fails on it later, after the models loaded (issue 49); refused here, for every file read
    if _SURROGATE_ESCAPE.search(text) and (bad := _lone_surrogate(value)) is not None:
        where = next(i for i, c in enumerate(bad) if "\ud800" <= c <= "\udfff")
        raise ValueError(f"a lone UTF-16 surrogate \\u{ord(bad[where]):04x} at character {where} of a string "
                         "(not Unicode text)")
    return value


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


def _lone_surrogate(value) -> str | None:
    """The first string in a parsed JSON value (keys included) holding a lone UTF-16 surrogate, or None."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if any("\ud800" <= c <= "\udfff" for c in item):
                return item
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return None


def read_text_file(path: Path, expected: str) -> str:
    """A UTF-8 text file, or one InputError line naming it: absent, a folder, not text, unreadable;
    `expected` says what the file should have been ("a /metrics dump")."""
    try:
        return read_text(path)  # a regular file only (open_regular): a FIFO is refused by name
    except FileNotFoundError:
        raise InputError(path, f"no such file (expected {expected})") from None
    except IsADirectoryError:
        raise InputError(path, f"is a folder, not {expected}") from None
    except UnicodeDecodeError:
        raise InputError(path, f"is not UTF-8 text (expected {expected})") from None
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror}") from None


def read_json_object(path: Path, *, missing: str) -> dict:
    """A JSON object from `path`, or one InputError line: `missing` when absent, the line when invalid."""
    try:
        data = loads(read_text(path))  # a regular file only: a FIFO is refused by name, never waited on
    except FileNotFoundError:
        raise InputError(path, missing) from None
    except UnicodeDecodeError:
        raise InputError(path, "is not UTF-8 text (expected JSON)") from None
    except IsADirectoryError:
        raise InputError(path, "is a folder, not a JSON file") from None
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror}") from None
    except ValueError as exc:
        raise InputError(path, f"invalid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise InputError(path, "invalid JSON: not an object")
    return data


# ----------------------------------------------------------------- reading: a regular file or one line

def open_regular(path: Path | str):
    """`path` opened for reading in binary, refused by name unless it is a regular file: a FIFO, a device or
    a socket (or a link to one) would block the open or the read forever, or never end. Opened non-blocking,
    checked on the open descriptor (no window between the look and the open), then switched to blocking."""
    import errno
    import fcntl
    import stat

    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # named as every presence check names it (file_kind)
            raise InputError(path, "is a symbolic link loop, not a regular file; dflash-eval reads only regular "
                                   "files") from None
        raise
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(21, "Is a directory", str(path))
        if not stat.S_ISREG(mode):
            kind = "a FIFO" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode) else "a device"
            raise InputError(path, f"is {kind}, not a regular file; dflash-eval reads only regular files")
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_bytes(path: Path | str) -> bytes:
    """A regular file's bytes (`open_regular`): the one way dflash-eval reads a file a user gave it."""
    with open_regular(path) as handle:
        return handle.read()


def read_text(path: Path | str, encoding: str = "utf-8") -> str:
    """A regular file's text (`open_regular`); UnicodeDecodeError as `bytes.decode` raises it. Universal
    newlines as `Path.read_text` (\\r\\n and \\r read as \\n)."""
    text = read_bytes(path).decode(encoding)
    return text.replace("\r\n", "\n").replace("\r", "\n")


ABSENT = "absent"


def file_kind(path: Path | str) -> str | None:
    """None for a regular file (or a link to one); ABSENT when nothing is there; else what is there instead,
    as a phrase: a folder, a FIFO, a socket, a device, a symbolic link loop, a dangling symbolic link, or
    what the system says. Why not `Path.is_file()`: it answers False for all of these alike, and a reader then
    said "no config.json" for a link loop and "not extracted yet" for a FIFO."""
    import errno
    import stat

    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        if os.path.islink(path):
            return f"a symbolic link to {os.readlink(path)}, which does not exist"
        return ABSENT
    except OSError as exc:
        return "a symbolic link loop" if exc.errno == errno.ELOOP else f"unreadable ({exc.strerror or exc})"
    if stat.S_ISREG(mode):
        return None
    return ("a folder" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode)
            else "a socket" if stat.S_ISSOCK(mode) else "a device")


def regular_file_present(path: Path | str, what: str = "") -> bool:
    """True for a regular file, False when nothing is there, else one InputError naming what is there
    instead: the one presence test of every reader of a file that may legitimately be absent."""
    kind = file_kind(path)
    if kind == ABSENT:
        return False
    if kind is not None:
        raise InputError(path, f"is {kind}, not a regular file{what}; dflash-eval reads only regular files")
    return True


def regular_files(paths, what: str = "") -> None:
    """Every path among `paths` that is not absent is a regular file (or a link to one), else one InputError
    naming it: checked before a folder is handed to a library that opens its files itself (transformers,
    safetensors)."""
    for path in paths:
        regular_file_present(path, what)
