"""The CLI reference (docs/cli-reference.md), generated from the Typer app itself, so the page cannot name a
flag the CLI does not take nor miss one it does (the README missed five before this page existed): every
command, its usage, its help and each argument and option with what it takes, its default and its help,
grouped by help panel where a command has panels. tests/test_docs.py fails when the file is not
what this module writes now; after changing a flag, regenerate with one command from the checkout's root:

    python -m dflash_eval.cli.reference            # rewrites docs/cli-reference.md
    python -m dflash_eval.cli.reference --check    # exit 1 when the file is stale (what the test checks)

The page is built from the click parameters the app declares, not from Rich's rendering of `--help`, so it
is the same on every machine and with every typer and rich version the project allows: no terminal width,
colour or box drawing in it, and this machine's paths (home, checkout, temporary folder) written as `~`,
`<checkout>` and `<tmp>`.
"""

from __future__ import annotations

import argparse
import enum
import sys
import tempfile
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[2]
DEFAULT_OUT = CHECKOUT / "docs" / "cli-reference.md"
REGENERATE = "python -m dflash_eval.cli.reference"


def _commands(app=None):
    """(words after `dflash-eval`, click command) for every command, in `--help` order: the root first, a
    group before its subcommands."""
    import typer.main

    from . import app as cli_app

    def walk(command, path):
        out = [(path, command)]
        for name, sub in (getattr(command, "commands", None) or {}).items():
            if not getattr(sub, "hidden", False):
                out += walk(sub, (*path, name))
        return out

    return walk(typer.main.get_command(app or cli_app), ())


def command_paths(app=None) -> list[tuple[str, ...]]:
    """Every command as the words after `dflash-eval` (() is the root; `("prompts", "list")`)."""
    return [path for path, _ in _commands(app)]


def _machine_free(text: str) -> str:
    """`text` with this machine's paths as placeholders (longest first: the checkout may be in the home)."""
    places = {str(CHECKOUT): "<checkout>", str(Path.home()): "~", tempfile.gettempdir(): "<tmp>"}
    for path, name in sorted(places.items(), key=lambda item: -len(item[0])):
        if len(path) > 1:
            text = text.replace(path, name)
    return text


def _cell(text) -> str:
    """A markdown table cell: one line, pipes escaped."""
    return " ".join(str(text).split()).replace("|", "\\|")


def _takes(param, ctx) -> str:
    """What an option takes, in the word `--help` shows (cli/root.py `_Option`: N, NUMBER, PATH, TEXT, a
    metavar); '' for a flag."""
    if getattr(param, "is_flag", False) or getattr(param, "count", False):
        return ""
    shown = getattr(param, "display_type_rich", None)
    return (shown(ctx) if shown else param.metavar) or "TEXT"


def _default(param) -> str:
    """The default `--help` shows, or '' (required, none, or a flag that is off)."""
    if param.required:
        return "required"
    default = param.default
    if callable(default) or default is None or default == () or default == []:
        return ""
    if getattr(param, "is_flag", False):
        if param.secondary_opts:  # --html/--no-html: the one that is on
            return f"`{param.opts[0] if default else param.secondary_opts[0]}`"
        return f"`{param.opts[0]}`" if default else ""
    if isinstance(default, enum.Enum):
        default = default.value
    if isinstance(default, (list, tuple)):
        default = ", ".join(str(d) for d in default)
    return f"`{_machine_free(str(default))}`"


def _names(param) -> str:
    if param.param_type_name == "argument":
        return (param.metavar or param.name.upper()).strip("{}")
    return ", ".join(f"`{name}`" for name in (*param.opts, *param.secondary_opts))


def _usage(path: tuple[str, ...], command) -> str:
    words = ["dflash-eval", *path]
    if any(p.param_type_name == "option" and not p.hidden for p in command.params):
        words.append("[OPTIONS]")
    for param in command.params:
        if param.param_type_name == "argument":
            name = (param.metavar or param.name.upper()).strip("{}")
            name += "..." if param.nargs == -1 else ""
            words.append(name if param.required else f"[{name}]")
    if getattr(command, "commands", None):
        words.append("COMMAND [ARGS]...")
    return " ".join(words)


def _section(path: tuple[str, ...], command) -> list[str]:
    title = " ".join(("dflash-eval", *path))
    out = ["", f"## `{title}`", "", f"`{_usage(path, command)}`", ""]
    if command.help:
        out += [_machine_free(" ".join(command.help.split())), ""]
    ctx = command.make_context(title, [], resilient_parsing=True)
    params = [p for p in command.params if not getattr(p, "hidden", False)]
    arguments = [p for p in params if p.param_type_name == "argument"]
    if arguments:
        out += ["| argument | help |", "|---|---|"]
        out += [f"| {_cell(_names(p))} | {_cell(_machine_free(p.help or ''))} |" for p in arguments]
        out.append("")
    panels: dict[str, list] = {}
    for param in params:
        if param.param_type_name == "option":
            panels.setdefault(getattr(param, "rich_help_panel", None) or "Options", []).append(param)
    for panel, options in panels.items():
        if len(panels) > 1:
            out += [f"**{panel}**", ""]
        out += ["| option | takes | default | help |", "|---|---|---|---|"]
        out += [f"| {_cell(_names(p))} | {_cell(_takes(p, ctx))} | {_cell(_default(p))} | "
                f"{_cell(_machine_free(p.help or ''))} |" for p in options]
        out.append("")
    subcommands = getattr(command, "commands", None) or {}
    if subcommands:
        out += ["| command | what it does |", "|---|---|"]
        out += [f"| [`{name}`](#{'-'.join(('dflash-eval', *path, name))}) | "
                f"{_cell(_machine_free(sub.get_short_help_str(limit=300)))} |"
                for name, sub in subcommands.items() if not getattr(sub, "hidden", False)]
        out.append("")
    while out[-1] == "":
        out.pop()
    return out


def reference(app=None) -> str:
    """docs/cli-reference.md: a contents list, then one section per command."""
    commands = _commands(app)
    lines = ["# CLI reference", "",
             f"Generated from the Typer app by `{REGENERATE}` (run it from the checkout's root after changing a "
             "flag); do not edit by hand: tests/test_docs.py fails when this page is not what the "
             "generator writes now. Each command's own page in `docs/` says what the flags do together; this "
             "page lists every flag exactly as the CLI declares it (`dflash-eval COMMAND --help` prints the "
             "same).", ""]
    lines += [f"- [`{' '.join(('dflash-eval', *path))}`](#{'-'.join(('dflash-eval', *path))})"
              for path, _ in commands]
    for path, command in commands:
        lines += _section(path, command)
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=REGENERATE, description="Write docs/cli-reference.md from the CLI.")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="the file to write (default: the checkout's "
                        "docs/cli-reference.md)")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 when the file is stale")
    args = parser.parse_args(argv)
    text = reference()
    current = args.out.read_text(encoding="utf-8") if args.out.is_file() else None
    if args.check:
        if current != text:
            print(f"{args.out}: not what the CLI declares now; regenerate with `{REGENERATE}`", file=sys.stderr)
            return 1
        print(f"{args.out}: up to date")
        return 0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text, encoding="utf-8")
    print(f"{args.out}: {'unchanged' if current == text else 'written'} ({len(command_paths())} commands)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
