"""The package version, read by provenance (pipeline/document.py) and `dflash-eval --version`."""

__version__ = "0.1.0"
