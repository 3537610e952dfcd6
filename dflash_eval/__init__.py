"""dflash-eval: offline evaluation of DFlash speculative-decoding drafters (see README.md)."""

__version__ = "0.1.0"
