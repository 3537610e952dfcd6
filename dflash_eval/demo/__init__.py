"""The bundled demo: a tiny hybrid Qwen3.5-architecture target and two drafters, committed with the package.

Layout (all under :data:`DEMO_DIR`)::

    corpus/                      MBPP sanitized + HumanEval, with LICENSES.md (training text of the demo)
    models/target/               qwen3_5_text (Gated-DeltaNet + gated attention), its own BPE tokenizer
    models/demo-reference/       z-lab format drafter, trained correctly
    models/demo-inhouse/         speculators format drafter, trained with the anchor-in-context bug
    models/BUILD.json            seeds, configs, corpus hashes, timings and the taus measured at build time

``python -m dflash_eval.demo.build`` regenerates ``models/`` (see :mod:`dflash_eval.demo.build`).
The in-house drafter records its verifier as ``../target`` (relative to its own folder), so it resolves
wherever the package is installed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

DEMO_DIR = Path(__file__).resolve().parent
CORPUS_DIR = DEMO_DIR / "corpus"
MODELS_DIR = DEMO_DIR / "models"

TARGET_NAME = "target"
REFERENCE_NAME = "demo-reference"
INHOUSE_NAME = "demo-inhouse"
DRAFTER_NAMES = (REFERENCE_NAME, INHOUSE_NAME)
BUILD_JSON = "BUILD.json"

MBPP_FILE = "mbpp_sanitized.json"
HUMANEVAL_FILE = "humaneval.jsonl"


def models_dir(root: str | Path | None = None) -> Path:
    return Path(root) if root is not None else MODELS_DIR


def target_path(root: str | Path | None = None) -> Path:
    """The demo target folder (a regular Hugging Face checkpoint folder)."""
    return models_dir(root) / TARGET_NAME


def reference_path(root: str | Path | None = None) -> Path:
    return models_dir(root) / REFERENCE_NAME


def inhouse_path(root: str | Path | None = None) -> Path:
    return models_dir(root) / INHOUSE_NAME


def drafter_paths(root: str | Path | None = None) -> list[Path]:
    """[demo-reference, demo-inhouse], in the order the demo reports them."""
    return [models_dir(root) / name for name in DRAFTER_NAMES]


def build_info(root: str | Path | None = None) -> dict[str, Any]:
    """The content of BUILD.json (what the build measured; see the build module)."""
    return json.loads((models_dir(root) / BUILD_JSON).read_text())


def available(root: str | Path | None = None) -> bool:
    """True when the target, both drafters and BUILD.json are present."""
    base = models_dir(root)
    return (target_path(base) / "config.json").is_file() and all(
        (p / "config.json").is_file() for p in drafter_paths(base)) and (base / BUILD_JSON).is_file()


__all__ = [
    "BUILD_JSON", "CORPUS_DIR", "DEMO_DIR", "DRAFTER_NAMES", "HUMANEVAL_FILE", "INHOUSE_NAME", "MBPP_FILE",
    "MODELS_DIR", "REFERENCE_NAME", "TARGET_NAME", "available", "build_info", "drafter_paths", "inhouse_path",
    "models_dir", "reference_path", "target_path",
]
