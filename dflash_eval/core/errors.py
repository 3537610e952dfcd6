"""The one exception type users see.

Every problem caused by input (a checkpoint, a config, a prompts file, a target) is raised as
`InputError(path, problem)`. The CLI prints it as a single line, `error: PATH: PROBLEM`, and exits with
code 2, without a traceback: the user needs to know which file is wrong and why, not where in our code
we noticed.
"""

from __future__ import annotations

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


def loads(text: str):
    """`json.loads`, with every way it can fail as a ValueError whose message is one readable phrase:
    invalid JSON (with the column), nesting too deep for the parser, an integer too long to convert."""
    import json

    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except RecursionError:
        raise ValueError("nested too deeply") from None
    except ValueError as exc:  # e.g. "Exceeds the limit (4300 digits) for integer string conversion"
        raise ValueError(f"a number JSON cannot hold ({str(exc).split(';')[0]})") from None


def read_text_file(path: Path, expected: str) -> str:
    """A UTF-8 text file, or one InputError line naming it: absent, a folder, not text, unreadable;
    `expected` says what the file should have been ("a /metrics dump")."""
    try:
        return Path(path).read_text(encoding="utf-8")
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
        data = loads(Path(path).read_text(encoding="utf-8"))
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
