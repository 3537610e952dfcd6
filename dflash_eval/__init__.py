"""dflash-eval: offline evaluation of DFlash speculative-decoding drafters (see README.md, ARCHITECTURE.md).

`dflash_eval.read_run(DIR)` reads a run folder as pandas DataFrames and `dflash_eval.read_track(DIR)` a
track folder's curve (frames.py); `dflash_eval.api.evaluate` runs an evaluation from Python and
`dflash_eval.tracking.track` a tracker. Imported lazily, so `import dflash_eval` (and `dflash-eval --help`) stays
light.
"""

__version__ = "0.1.0"


def __getattr__(name: str):
    if name in ("read_run", "RunFrames", "read_track"):
        from . import frames

        return getattr(frames, name)
    raise AttributeError(f"module 'dflash_eval' has no attribute {name!r}")
