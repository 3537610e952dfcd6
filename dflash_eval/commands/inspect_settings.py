"""`inspect`'s own section (core/settings/sections.py): the target its checks need, the rules it shows the
drafter under, the engines table, the base checkpoint of the MASK check and the fc probe. No other command
shares these flags (run's --target and --semantics are a run's, inspect's only a view), so they live beside
the command; cli/inspect.py takes the section whole (cli/options.takes)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ..core.errors import InputError
from ..core.settings.sections import Section, setting

OPTIONS = "Options"  # Typer's own panel: inspect has few flags
PROBE_DTYPES = ("float16", "bfloat16", "float32")


@dataclass(frozen=True)
class InspectSettings(Section):
    """What `inspect DRAFTER` shows beside the spec: checks against --target, another reference's rules, the
    engines' readings, the MASK row against --base, fc's range over a probe text."""

    target: Optional[str] = None
    semantics: Optional[str] = None
    engines: bool = False
    base: Optional[str] = None
    probe: bool = False
    probe_dtype: str = "float16"

    FLAGS = (
        setting("target", ("--target", "-t"), Optional[str], None,
                "Target folder or HF cache name, for the checks that need it.", OPTIONS),
        setting("semantics", "--semantics", Optional[str], None, "Show the drafter under these rules (zlab, "
                "speculators, vllm, sglang, llamacpp or deepspec) instead of its format's.", OPTIONS),
        setting("engines", "--engines", bool, False, "Also the table of how each engine (z-lab, speculators, vLLM, "
                "SGLang, llama.cpp, DeepSpec) reads this checkpoint, one row per reading, each cell with the file and "
                "function that decides it; cells that differ from the checkpoint's own rules marked.", OPTIONS),
        setting("base", "--base", Optional[str], None, "The checkpoint the embedding table was initialised from: is "
                "the MASK row still its initialisation (never trained)?", OPTIONS),
        setting("probe", "--probe/--no-probe", bool, False, "Load the target and run it over a short probe text: "
                "fc's output range at --probe-dtype, overflows counted (needs --target).", OPTIONS),
        setting("probe_dtype", "--probe-dtype", str, "float16",
                "The dtype the fc probe computes in (float16, bfloat16, float32).", OPTIONS),
    )

    def check(self) -> None:
        """--probe-dtype names a dtype the probe computes in."""
        if self.probe_dtype not in PROBE_DTYPES:
            raise InputError(None, f"--probe-dtype {self.probe_dtype!r}: one of {', '.join(PROBE_DTYPES)}")
