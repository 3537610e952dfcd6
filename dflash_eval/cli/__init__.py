"""The `dflash-eval` command line: one module per command or command group, each only parsing options,
calling the library (commands/) and printing what it returns. `COMMANDS` is the one list of them, in the
order `--help` shows them, each under its panel: the five stories the README tells (evaluate, read the
results, follow a training run, compare with a server, set up)."""

from ..doctor import cli as doctor
from ..serving import cli as served
from ..training.cli import track, trained_taps
from . import demo, diff, export, inspect, merge, plan, prompts, report, run, show
from .root import app, main

EVALUATE, RESULTS, TRAINING, SERVING, SETUP = "Evaluate", "Results", "Training", "Serving", "Setup"

COMMANDS = (  # (panel, name, command function)
    (EVALUATE, "run", run.run),
    (EVALUATE, "doctor", doctor.doctor),
    (EVALUATE, "demo", demo.demo),
    (RESULTS, "report", report.report),
    (RESULTS, "show", show.show),
    (RESULTS, "diff", diff.diff),
    (RESULTS, "merge", merge.merge),
    (TRAINING, "track", track.track),
    (TRAINING, "trained-taps", trained_taps.trained_taps),
    (SERVING, "served", served.served),
    (SERVING, "export-serving", export.export_serving),
    (SETUP, "inspect", inspect.inspect),
    (SETUP, "plan", plan.plan),
)
GROUPS = ((SETUP, "prompts", prompts.prompts_app),)  # (panel, name, Typer group)

for _panel, _name, _command in COMMANDS:
    app.command(_name, rich_help_panel=_panel)(_command)
for _panel, _name, _group in GROUPS:
    app.add_typer(_group, name=_name, rich_help_panel=_panel)

__all__ = ["COMMANDS", "GROUPS", "app", "main"]
