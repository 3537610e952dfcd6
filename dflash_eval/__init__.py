"""dflash-eval: offline evaluation of DFlash speculative-decoding drafters (README.md; ARCHITECTURE.md says
where everything lives).

The library's compositions, re-exported here for notebooks and scripts:

    import dflash_eval
    run = dflash_eval.evaluate(dflash_eval.RunOptions(drafters=["ckpt"], out=Path("runs/a"), target="..."))
    frames = dflash_eval.read_run("runs/a")          # pandas DataFrames
    curve = dflash_eval.read_track("track")          # a training run's curve

Imported lazily (PEP 562), so `import dflash_eval` and `dflash-eval --help` load neither torch nor
transformers; `dir(dflash_eval)` lists every name for completion.
"""

from .core.version import __version__

# public name -> the module that defines it
_EXPORTS = {
    "RunOptions": "core.settings.run_settings", "Reporter": "core.settings.run_settings", "InputError": "core.errors",
    "evaluate": "commands.evaluate",
    "run_doctor": "doctor.commands.doctor",
    "track": "training.commands.track", "TrackOptions": "training.commands.track", "Tracker": "training.commands.track",
    "merge": "commands.merge",
    "diff": "commands.diff",
    "inspect_drafter": "commands.inspect",
    "read_run": "commands.frames", "read_track": "commands.frames", "RunFrames": "commands.frames",
}

__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str):
    if name in _EXPORTS:
        import importlib

        value = getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'dflash_eval' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
