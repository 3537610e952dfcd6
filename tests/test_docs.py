"""The documentation cannot drift from the CLI (issue 35): docs/cli-reference.md is what the generator writes
from the Typer app now, every flag `--help` prints is in it, every command has a row in the README's command
table that links to a docs/ page naming it, and every link of the README and docs/ leads somewhere real.
(tests/test_readme_commands.py runs the commands these pages show.)"""

from __future__ import annotations

import re
from collections import deque
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dflash_eval.cli import app
from dflash_eval.cli import reference as R

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
REGENERATE = "python -m dflash_eval.cli.reference"


@pytest.fixture(scope="module")
def generated() -> str:
    return R.reference()


def sections(text: str) -> dict[str, str]:
    """docs/cli-reference.md's section of each command, by its title (`dflash-eval prompts show`)."""
    parts = re.split(r"^## `([^`]+)`\n", text, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2]))


def test_the_cli_reference_is_what_the_generator_writes_now(generated):
    written = (DOCS / "cli-reference.md").read_text(encoding="utf-8")
    assert written == generated, (f"docs/cli-reference.md is not what the CLI declares now: regenerate it with "
                                  f"`{REGENERATE}` (from the checkout's root) and commit the result")


def test_the_generator_is_the_same_on_any_terminal_and_machine(generated, monkeypatch):
    for name, value in {"COLUMNS": "37", "TERMINAL_WIDTH": "37", "FORCE_COLOR": "1", "GITHUB_ACTIONS": "true",
                        "NO_COLOR": "1"}.items():
        monkeypatch.setenv(name, value)
    assert R.reference() == generated
    assert "\x1b[" not in generated and "╭" not in generated
    for path in (str(ROOT), str(Path.home())):
        assert path not in generated


def test_every_flag_help_prints_is_in_the_reference(generated):
    """The page is built from the click parameters; `--help` is rendered by Rich from the same ones. Every
    option word `--help` shows for a command must be in that command's section, and nothing else."""
    by_title = sections(generated)
    paths, seen = R.command_paths(), 0
    assert set(by_title) == {" ".join(("dflash-eval", *path)) for path in paths}
    for path in paths:
        shown = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "200"})
        assert shown.exit_code == 0, shown.output
        rows = re.findall(r"^│ \*?\s{0,4}(--[a-z0-9-]+)(?: +(--[a-z0-9-]+))?", shown.output, flags=re.M)
        flags = {flag for row in rows for flag in row if flag} - {"--help"}
        section = by_title[" ".join(("dflash-eval", *path))]
        listed = set(re.findall(r"`(--[a-z][a-z0-9-]*)`", section))
        assert flags <= listed, (path, flags - listed)
        seen += len(flags)
        table_flags = {f for line in section.splitlines() if line.startswith("| `-")
                       for f in re.findall(r"`(--[a-z][a-z0-9-]*)`", line.split("|")[1])}
        assert table_flags <= flags | {"--version"}, (path, table_flags - flags)
    assert seen > 150, f"only {seen} flags read from --help: the row pattern no longer matches Rich's layout"


def test_a_stale_reference_is_refused_with_the_command_that_regenerates_it(tmp_path, capsys):
    stale = tmp_path / "cli-reference.md"
    stale.write_text("# CLI reference\n\nan old copy\n")
    assert R.main(["--check", "--out", str(stale)]) == 1
    assert f"regenerate with `{REGENERATE}`" in capsys.readouterr().err
    assert R.main(["--out", str(stale)]) == 0 and R.main(["--check", "--out", str(stale)]) == 0


# ------------------------------------------------------------------------------------ README and docs/

def command_table(text: str) -> dict[str, str]:
    """The README's command table: command name -> the docs page its first cell links to."""
    body = text.split("\n## Commands\n", 1)[1].split("\n## ", 1)[0]
    return dict(re.findall(r"^\| \[`dflash-eval ([a-z-]+)`\]\((docs/[^)#]+\.md)[^)]*\)", body, flags=re.M))


def test_every_command_has_a_row_in_the_readme_table_and_a_page_naming_it():
    table = command_table(README.read_text(encoding="utf-8"))
    commands = {path[0] for path in R.command_paths() if len(path) == 1}
    assert set(table) == commands, (f"commands without a README row: {sorted(commands - set(table))}; "
                                    f"rows of no command: {sorted(set(table) - commands)}")
    for name, page in table.items():
        headings = re.findall(r"^#+ .*$", prose((ROOT / page).read_text(encoding="utf-8")), flags=re.M)
        assert any(f"`dflash-eval {name}" in h for h in headings), f"no heading of {page} names `dflash-eval {name}`"


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation but `-` and `_` dropped, spaces as `-`."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def prose(text: str) -> str:
    """`text` without its fenced code blocks (a `#` line or `](` there is code, not markdown)."""
    return re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for heading in re.findall(r"^#{1,6} (.+)$", prose(path.read_text(encoding="utf-8")), flags=re.M):
        base = slug(heading)
        count = seen.get(base, 0)
        seen[base] = count + 1
        out.add(base if count == 0 else f"{base}-{count}")
    return out


def links(path: Path) -> list[str]:
    return [target for target in re.findall(r"\]\(([^)\s]+)\)", prose(path.read_text(encoding="utf-8")))
            if not re.match(r"[a-z]+:", target)]


def test_every_link_leads_to_a_file_and_heading_that_exist_and_every_page_is_reachable():
    broken, reached, todo = [], {README}, deque([README])
    while todo:
        page = todo.popleft()
        for target in links(page):
            file, _, anchor = target.partition("#")
            dest = (page.parent / file).resolve() if file else page
            if not dest.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such file)")
                continue
            if anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
            if dest.suffix == ".md" and dest.parent == DOCS and dest not in reached:
                reached.add(dest)
                todo.append(dest)
    assert broken == []
    orphans = sorted(p.name for p in DOCS.glob("*.md") if p not in reached)
    assert orphans == [], f"docs pages no link from the README leads to: {orphans}"


def test_the_slug_is_githubs():
    assert slug("`dflash-eval show`: the blocks along the walk") == "dflash-eval-show-the-blocks-along-the-walk"
    assert slug("vLLM's serving rules (`--semantics vllm`)") == "vllms-serving-rules---semantics-vllm"
    assert slug("Cost (`benchmarks/trained_taps_cost.py`)") == "cost-benchmarkstrained_taps_costpy"


def test_help_shows_the_commands_in_the_five_panels_of_the_one_list():
    """`dflash-eval --help` groups the commands in the stories the README tells (Evaluate, Results, Training,
    Serving, Setup), in that order; the commands are exactly cli.COMMANDS and cli.GROUPS, each under its panel
    (one list registers them: a module that registers itself elsewhere fails here)."""
    import typer

    from dflash_eval.cli import COMMANDS, GROUPS

    listed = {name: panel for panel, name, _ in (*COMMANDS, *GROUPS)}
    registered = typer.main.get_command(app).commands
    assert set(registered) == set(listed)
    assert {name: registered[name].rich_help_panel for name in registered} == listed
    shown = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "120", "TERM": "dumb"}).output
    panels = re.findall(r"^╭─ (\w+) ─", shown, flags=re.M)
    assert panels == ["Options", "Evaluate", "Results", "Training", "Serving", "Setup"]
    blocks = dict(zip(panels, re.split(r"^╭─ \w+ ─.*$", shown, flags=re.M)[1:]))
    for name, panel in listed.items():
        assert re.search(rf"^│ {re.escape(name)} ", blocks[panel], flags=re.M), f"{name} not under {panel}"
