"""Which snapshot of a Hugging Face repository a result measured, and the warning when two results of one
repository name measured different ones.

Why: one repository name can hold two architectures at two revisions (z-lab/dflash #152:
`Qwen3.5-122B-A10B-DFlash` has 6 layers, 8 taps and a 4096 window at one commit, 4 layers, 6 taps and 2048 at
an earlier one; acceptance 1.4-2.6% vs 10-12% under llama.cpp). A result that names only the repository cannot
say which one it measured, so a drafter or target resolved from the HF cache records the commit its snapshot
folder is named after, beside its content fingerprint.

The cache layout (huggingface_hub `constants.REPO_ID_SEPARATOR`, `file_download.repo_folder_name`,
`_snapshot_download`): `<cache>/models--<org>--<name>/snapshots/<commit>/`; a repository id never contains
"--" (`validate_repo_id`), so the folder name splits back into org and name.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import PurePath
from typing import Any

SEPARATOR = "--"


def snapshot_of(path: str | PurePath | None) -> dict[str, str] | None:
    """{"repo": "org/name", "revision": commit} when `path` lies in an HF cache snapshot folder, else None."""
    parts = PurePath(str(path)).parts if path else ()
    for i in range(len(parts) - 2):
        head = parts[i]
        if head.startswith(f"models{SEPARATOR}") and parts[i + 1] == "snapshots":
            repo = head[len(f"models{SEPARATOR}"):].split(SEPARATOR)
            if repo and all(repo):
                return {"repo": "/".join(repo), "revision": parts[i + 2]}
    return None


def drafter_architecture(spec: Mapping[str, Any]) -> dict[str, Any]:
    """The shape a drafter's numbers depend on, from its run.json spec: layers, taps, sliding windows, block."""
    return {"layers": spec.get("num_layers"), "taps": len(spec.get("taps") or ()),
            "sliding window": sorted({layer.get("window") for layer in spec.get("layers") or ()
                                      if layer.get("window") is not None}) or None,
            "block size": spec.get("block_size"), "hidden size": spec.get("hidden_size")}


def target_architecture(target: Mapping[str, Any]) -> dict[str, Any]:
    return {"model type": target.get("model_type"), "layers": target.get("num_layers"),
            "hidden size": target.get("hidden_size"), "vocab size": target.get("vocab_size")}


def _show(value: Any) -> str:
    if isinstance(value, list):
        return "/".join(map(str, value))
    return str(value)


def conflicts(items: Iterable[tuple[str, Mapping[str, str] | None, Mapping[str, Any]]]) -> list[str]:
    """One warning per pair of results of one repository name measured at different revisions or on different
    architectures. `items`: (label, snapshot or None, architecture); results without a snapshot are skipped."""
    seen: dict[str, tuple[str, Mapping[str, str], Mapping[str, Any]]] = {}
    warnings: list[str] = []
    for label, snapshot, arch in items:
        if not snapshot:
            continue
        if snapshot["repo"] not in seen:
            seen[snapshot["repo"]] = (label, snapshot, arch)
            continue
        first_label, first_snapshot, first_arch = seen[snapshot["repo"]]
        changed = [f"{key} {_show(first_arch.get(key))} vs {_show(arch.get(key))}"
                   for key in first_arch if first_arch.get(key) != arch.get(key)]
        if first_snapshot["revision"] == snapshot["revision"] and not changed:
            continue
        what = []
        if first_snapshot["revision"] != snapshot["revision"]:
            what.append(f"revisions {first_snapshot['revision'][:12]} vs {snapshot['revision'][:12]}")
        if changed:
            what.append("architectures differ (" + ", ".join(changed) + ")")
        warnings.append(f"{first_label} and {label} name one repository, {snapshot['repo']}, but measured different "
                        f"snapshots: {'; '.join(what)}: their numbers are not of the same checkpoint")
    return warnings
