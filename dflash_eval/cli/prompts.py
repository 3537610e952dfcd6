"""`dflash-eval prompts list|show`: the prompt sets and what is sent to the target after the chat template.
`show`'s flags are its section's (commands/prompts_settings.PromptsShown)."""

from __future__ import annotations

import typer

from ..commands.prompts_settings import PromptsShown
from .common import fail, reports_input_errors, stdout_console
from .options import takes

prompts_app = typer.Typer(no_args_is_help=True, help="Prompt sets: what they hold and what is sent.")



@prompts_app.command("list")
def prompts_list() -> None:
    """The bundled prompt sets, their size and license; the paper's other sets and whether this machine's
    Hugging Face cache holds them."""
    from rich.table import Table

    from ..core.safe_text import safe
    from ..pipeline.hf_prompts import availability
    from ..pipeline.prompts import describe_sets

    table = Table(header_style="bold")
    for column in ("set", "prompts", "description"):
        table.add_column(column, justify="right" if column == "prompts" else "left")
    for name, count, description in describe_sets():
        table.add_row(name, str(count), description)
    console = stdout_console()
    console.print(table)
    offline = Table(header_style="bold", title="the paper's other sets, read offline from the Hugging Face cache")
    for column in ("set", "dataset", "in this cache", "to get it (once, online)"):
        offline.add_column(column)
    for name, repo, revision, command in availability():
        offline.add_row(name, repo, f"yes, {safe(revision[:12])}" if revision else "no", "" if revision else command)
    console.print(offline)
    console.print("paper:NAME takes only the rows the DFlash paper evaluated (e.g. paper:gsm8k: 128 of 1319); "
                  "--limit N --seed 42 draws as dflash 0.1.0's benchmark does; any cached dataset: "
                  "--prompts hf:REPO[:CONFIG][:SPLIT] --prompt-field COLUMN")
    console.print("also: --prompts FILE.jsonl ({\"id\", \"prompt\"} or {\"id\", \"messages\"}) and --prompts dir:PATH "
                  "(code-completion prompts from the head of each source file)")


@prompts_app.command("show")
@reports_input_errors
@takes(shown=PromptsShown)
def prompts_show(
    shown: PromptsShown,
    source: str = typer.Argument(..., help="humaneval, mbpp, demo, FILE.jsonl, dir:PATH, a set of the paper's table "
                                           "(gsm8k, mt-bench, ...), paper:NAME or hf:REPO[:CONFIG][:SPLIT]."),
) -> None:
    """Print exactly what `run` sends to the target for a prompt set: its thinking rule, its chat template."""
    from rich.panel import Panel
    from rich.text import Text

    from ..demo import target_path
    from ..formats.files import resolve_local_or_cached
    from ..model.target import load_tokenizer
    from ..pipeline.prompts import load_prompts, render_for_target
    from ..pipeline.thinking import target_thinking

    prompts = load_prompts(source, prompt_field=shown.prompt_field)
    if shown.prompt_id is not None:
        prompts = [p for p in prompts if p.id == shown.prompt_id]
        if not prompts:
            raise fail(f"{source}: no prompt with id {shown.prompt_id!r}")
    else:
        prompts = prompts[:shown.limit]
    folder = resolve_local_or_cached(shown.target) if shown.target else target_path()
    tokenizer = load_tokenizer(folder)  # run's own loader and thinking rule
    thinking, source = target_thinking(folder, shown.thinking)
    from ..core.safe_text import printable, safe

    console = stdout_console()
    flag = f"thinking {'on' if thinking else 'off'}" + (" (family default)" if source.startswith("family") else "")
    for prompt, text in zip(prompts, render_for_target(prompts, tokenizer, thinking)):
        console.print(Panel(Text(printable(text, keep="\n\t")),
                            title=f"{safe(prompt.id)} ({safe(prompt.set)}) as sent, {safe(flag)}", title_align="left"))
