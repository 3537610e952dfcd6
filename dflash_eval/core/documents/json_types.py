"""A parsed JSON value checked against the TypedDict that describes it (core/documents/run_document.py and its siblings).

Why: the files dflash-eval writes are read back by `report`, `show`, `diff`, `merge`, `frames` and the
library. A file edited by hand, damaged or written by another version must be one InputError naming the
file and the field ("drafters[1].metrics.tau_macro is not a number (found a string)"), found when the
file is read; past the reader a document has its declared types, so an error raised while rendering is
our bug, reported as one (cli/common.py saves its traceback), never as the user's.

Understood annotations: the JSON scalars (str, int, float, bool, None; an int is a float, a bool is
neither), Any / object (anything), Literal[...], unions (X | None), list[X], tuple[X, ...], dict[str, X]
and TypedDicts (required and NotRequired keys; keys the class does not declare are allowed: a newer
writer may add fields an older reader ignores).
"""

from __future__ import annotations

import functools
import math
import types
import typing
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

from ..errors import InputError

_NAMES = {str: "a string", int: "an integer", float: "a number", bool: "true or false", type(None): "null",
          list: "a list", dict: "an object"}


def _found(value: Any) -> str:
    """What a JSON value is, in _NAMES' words; bool before int (a bool is an int to isinstance)."""
    kind = next((k for k in (type(None), bool, int, float, str, list, dict) if isinstance(value, k)), None)
    return _NAMES[kind] if kind else type(value).__name__


def is_typeddict(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, dict) and hasattr(annotation, "__required_keys__")


@functools.lru_cache(maxsize=None)
def field_types(cls: type) -> dict[str, Any]:
    """A TypedDict's fields and their types (NotRequired / Required stripped)."""
    return {k: strip_required(v) for k, v in typing.get_type_hints(cls, include_extras=True).items()}


@functools.lru_cache(maxsize=None)
def required_keys(cls: type) -> frozenset[str]:
    """The keys a TypedDict requires; NotRequired read from the resolved annotations, so a class in a module
    with `from __future__ import annotations` (whose __required_keys__ Python 3.11 gets wrong) is right too."""
    hints = typing.get_type_hints(cls, include_extras=True)
    # the ignore: cls is a TypedDict class, which has __required_keys__; mypy has no type for "a TypedDict class"
    declared: frozenset[str] = cls.__required_keys__  # type: ignore[attr-defined]
    return frozenset(k for k in declared if typing.get_origin(hints.get(k)) is not typing.NotRequired)


def describe(annotation: Any) -> str:
    """What `annotation` admits, as the error message says it ("a number or null")."""
    if annotation is Any or annotation is object:
        return "any value"
    if annotation in _NAMES:
        return _NAMES[annotation]
    if is_typeddict(annotation):
        return "an object"
    origin = get_origin(annotation)
    if origin is Literal:
        return " or ".join(repr(a) for a in get_args(annotation))
    if origin in (Union, types.UnionType):
        return " or ".join(describe(a) for a in get_args(annotation))
    if origin in (list, tuple):
        return "a list"
    if origin is dict:
        return "an object"
    return str(annotation)


def _fits(value: Any, annotation: Any) -> bool:
    """Whether `value` has the outer shape of `annotation` (for choosing a union's member)."""
    if annotation is Any or annotation is object:
        return True
    if annotation is type(None) or annotation is None:
        return value is None
    if annotation is bool:
        return isinstance(value, bool)
    if annotation is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if annotation is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if annotation is str:
        return isinstance(value, str)
    if is_typeddict(annotation):
        return isinstance(value, dict)
    origin = get_origin(annotation)
    if origin is Literal:
        return any(value == a and type(value) is type(a) for a in get_args(annotation))
    if origin in (list, tuple):
        return isinstance(value, list)
    if origin is dict:
        return isinstance(value, dict)
    if origin in (Union, types.UnionType):
        return any(_fits(value, a) for a in get_args(annotation))
    raise TypeError(f"json_types cannot check {annotation!r}")


def _join(field: str, part: str | int) -> str:
    if isinstance(part, int):
        return f"{field}[{part}]"
    return f"{field}.{part}" if field else part


def check_json(value: Any, annotation: Any, path: Path | str | None, field: str = "") -> None:
    """Refuse `value` unless it has the type `annotation` declares, everywhere inside: one InputError naming
    the file (`path`) and the field (`field` is the prefix: "drafters[0]")."""
    where = field or "the document"
    if not _fits(value, annotation):
        raise InputError(path, f"{where} is not {describe(annotation)} (found {_found(value)}); edited by "
                               "hand, damaged or written by another version?")
    if isinstance(value, float) and not math.isfinite(value):
        raise InputError(path, f"{where} is {value}, not a finite number")
    origin = get_origin(annotation)
    if origin in (Union, types.UnionType):
        # of the members with the value's shape, the first whose required keys are all there; when none has them
        # all, the last such member, so that the error names the key it misses
        members = [a for a in get_args(annotation) if _fits(value, a)]
        complete = [a for a in members if not is_typeddict(a) or required_keys(a) <= value.keys()]
        check_json(value, (complete or members[-1:])[0], path, field)
    elif is_typeddict(annotation):
        hints = field_types(annotation)
        for key in sorted(required_keys(annotation)):
            if key not in value:
                raise InputError(path, f"{_join(field, key)} is missing; edited by hand, damaged or written by "
                                       "another version?")
        for key, child in value.items():
            if key in hints:
                check_json(child, hints[key], path, _join(field, key))
    elif origin in (list, tuple):
        args = get_args(annotation)
        member = args[0] if args else Any
        for index, child in enumerate(value):
            check_json(child, member, path, _join(field, index))
    elif origin is dict:
        args = get_args(annotation)
        member = args[1] if len(args) == 2 else Any
        for key, child in value.items():
            check_json(child, member, path, _join(field, key))


def strip_required(annotation: Any) -> Any:
    """NotRequired[X] / Required[X] -> X (get_type_hints keeps them only with include_extras)."""
    if get_origin(annotation) in (typing.NotRequired, typing.Required):
        return get_args(annotation)[0]
    return annotation
