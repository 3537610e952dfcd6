"""The `dflash-eval` command line: one module per command or command group, each only parsing options,
calling the library (commands/) and handing the result to render/. Importing this package registers every
command on `app`, in the order `--help` lists them."""

from . import inspect, plan, run, merge, report, diff, show, export, served, doctor, trained_taps, track, prompts, demo  # noqa: F401,I001  (each registers its commands)
from .root import app, main

__all__ = ["app", "main"]
