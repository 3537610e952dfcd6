"""Bad numbers are bad input, said before any work (issue 36, class 5).

`track --settle nan` and `track --watch --interval inf` were internal errors (exit 1), the latter only after
every checkpoint had been evaluated: NaN passes click's ranges (every comparison with it is false) and inf
reached time.sleep. Every float option of every command now goes through one parser (cli/options.
finite_number); here every float option of every command, found by walking the command tree, is given NaN,
inf and -inf and must be one usage line naming it, exit 2, with nothing run."""

from __future__ import annotations

import math

import pytest
from typer.main import get_command
from typer.testing import CliRunner

from dflash_eval.cli import app

runner = CliRunner()


def float_options() -> list[tuple[list[str], str, object]]:
    """(command path, option name, click parameter) for every option whose value is a number with a point."""
    out = []

    def walk(command, path):
        for sub_name, sub in (getattr(command, "commands", None) or {}).items():
            walk(sub, [*path, sub_name])
        for param in getattr(command, "params", []):
            annotation = param.type_descriptor.annotation
            if (annotation is float or float in getattr(annotation, "__args__", ())) and param.opts[0].startswith("--"):
                out.append((path, param.opts[0], param))

    walk(get_command(app), [])
    return out


OPTIONS = float_options()


def test_the_walk_finds_every_float_option():
    found = {(" ".join(path), name) for path, name, _ in OPTIONS}
    for expected in (("run", "--temperature"), ("run", "--top-p"), ("run", "--dist-timeout"), ("doctor", "--temperature"),
                     ("track", "--interval"), ("track", "--settle"), ("track", "--top-p"), ("plan", "--temperature"),
                     ("diff", "--max-continuation-mismatch")):
        assert expected in found, found


def test_every_float_option_goes_through_the_one_parser():
    """No float option is a bare click FLOAT or FloatRange, which let NaN and inf through."""
    def ours(param) -> bool:
        parser = param.type_descriptor.parameter_info.parser
        return parser is not None and "finite_number" in parser.__qualname__

    bare = [(" ".join(path), name) for path, name, param in OPTIONS if not ours(param)]
    assert not bare, bare


@pytest.mark.parametrize("path,name", [(p, n) for p, n, _ in OPTIONS], ids=[f"{' '.join(p)} {n}" for p, n, _ in OPTIONS])
def test_nan_and_inf_are_one_usage_line(path, name, tmp_path):
    for value in ("nan", "inf", "-inf", "1e999"):
        result = runner.invoke(app, [*path, name, value, "--out", str(tmp_path / "out")] if "--out" in
                               [o for p in _params(path) for o in p.opts] else [*path, name, value])
        assert result.exit_code == 2, (path, name, value, result.output)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and name in lines[0], lines
        assert "finite number" in lines[0] and "internal error" not in lines[0], lines[0]
    assert not (tmp_path / "out").exists()


def _params(path: list[str]):
    command = get_command(app)
    for part in path:
        command = command.commands[part]
    return command.params


def test_track_refuses_them_before_any_checkpoint_is_evaluated(tmp_path):
    """The library's own check (training/commands/track.check_track_options), for callers that are not the CLI."""
    from dflash_eval.core.errors import InputError
    from dflash_eval.core.settings.run_settings import RunOptions
    from dflash_eval.training.commands.track import TrackOptions, check_track_options
    from dflash_eval.training.commands.track_settings import Tracking

    run = RunOptions(drafters=[], out=tmp_path / "t", target=str(tmp_path))
    for field, value in (("interval", math.inf), ("interval", math.nan), ("settle", math.nan), ("settle", -1.0)):
        with pytest.raises(InputError, match=f"--{field} must be a finite number"):
            check_track_options(TrackOptions(sources=[tmp_path], run=run, tracking=Tracking(**{field: value})))


def test_in_range_values_still_parse():
    from dflash_eval.cli.options import finite_number

    assert finite_number(0)("0") == 0.0 and finite_number(0, 1)("1") == 1.0 and finite_number()("-2.5") == -2.5
    for parse, value in ((finite_number(0, low_open=True), "0"), (finite_number(0, 1), "1.01"), (finite_number(1), "0.5")):
        with pytest.raises(Exception, match="is not"):
            parse(value)


# ------------------------------------------------------------------------------------------------ domains (issue 49)


def number_options() -> list[tuple[list[str], str, object]]:
    """(command path, option name, parameter) for every option whose value is a number (int or float)."""
    out = []

    def walk(command, path):
        for sub_name, sub in (getattr(command, "commands", None) or {}).items():
            walk(sub, [*path, sub_name])
        for param in getattr(command, "params", []):
            annotation = param.type_descriptor.annotation
            kinds = set(getattr(annotation, "__args__", ())) | {annotation}
            if kinds & {int, float} and param.opts[0].startswith("--") and not getattr(param, "is_flag", False):
                out.append((path, param.opts[0], param))

    walk(get_command(app), [])
    return out


def domain(param) -> tuple:
    """An option's domain as parsed: click's range for an int, finite_number's bounds for a float."""
    import inspect

    parser = param.type_descriptor.parameter_info.parser
    if parser is not None:
        bounds = inspect.getclosurevars(parser).nonlocals
        return ("float", bounds.get("low"), bounds.get("high"), bounds.get("low_open"))
    return ("int", param.min, param.max, False)


NUMBERS = number_options()


def test_one_domain_per_option_name_across_commands():
    """`--seed -1` was refused by numpy in doctor and diff (internal error) and taken by run: one name, one
    rule, in every command that has it."""
    by_name: dict[str, set] = {}
    for _path, name, param in NUMBERS:
        by_name.setdefault(name, set()).add(domain(param))
    assert {n: d for n, d in by_name.items() if len(d) > 1} == {}


def test_every_number_option_has_a_declared_lower_bound():
    unbounded = [(" ".join(path), name) for path, name, param in NUMBERS if domain(param)[1] is None]
    assert unbounded == []


SECONDS = {"--interval", "--settle", "--lock-timeout", "--dist-timeout"}


@pytest.mark.parametrize("path,name", [(p, n) for p, n, _ in NUMBERS], ids=[f"{' '.join(p)} {n}" for p, n, _ in NUMBERS])
def test_a_value_outside_the_domain_is_one_usage_line(path, name, tmp_path):
    """Below the lower bound (and, for seconds, 1e30: `track --settle 1e30` overflowed time.sleep): one line
    naming the option, exit 2, nothing run."""
    kind, low, high, low_open = domain(dict((n, p) for q, n, p in NUMBERS if q == path)[name])
    values = [str(low if kind == "float" and low_open else (low - 1 if kind == "int" else low - 0.5))]
    if name in SECONDS:
        values.append("1e30")
    if high is not None:
        values.append(str(high + 1))
    for value in values:
        args = [*path, name, value]
        if "--out" in [o for p in _params(path) for o in p.opts]:
            args += ["--out", str(tmp_path / "out")]
        result = runner.invoke(app, args)
        assert result.exit_code == 2, (path, name, value, result.output)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and name in lines[0], lines
        assert "internal error" not in lines[0], lines[0]
    assert not (tmp_path / "out").exists()
