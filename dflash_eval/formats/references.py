"""Published reference points: z-lab's own DFlash drafters and the DFlash paper's tau table.

Why: a number for *your* drafter means little on its own. The fair comparison is z-lab's published drafter
for the same target, replayed through the same prompts, and the paper's tau for that target and dataset.
This module maps a target (an HF repo id, a local folder, or a Hugging Face cache snapshot) to that drafter,
finds the drafter on disk, finds the verifier a speculators-format drafter recorded, and looks up the paper.

The facts live in package data (`dflash_eval/data/*.json`, each with a `source` note saying where they come
from). Everything that can be answered from the local Hugging Face cache is answered from it: this tool is
used on machines without network access, and a cache miss is a user-fixable input problem, so it becomes
one `InputError` line with the command that fixes it, never a huggingface_hub traceback.

`cache_dir` parameters default to huggingface_hub's own default. Note that huggingface_hub reads
`HF_HUB_CACHE` / `HF_HOME` / `HF_HUB_OFFLINE` once, when it is imported; changing the environment later has
no effect on it, so callers (and tests) that need another cache pass `cache_dir` explicitly.
"""

from __future__ import annotations

import json
import os
import re
from functools import lru_cache
from importlib import resources
from pathlib import Path

from dflash_eval.core.errors import InputError

from .published import settings_differ

_TRUE = {"1", "ON", "YES", "TRUE"}  # what huggingface_hub accepts as true


@lru_cache(maxsize=None)
def _data(name: str) -> dict:
    return json.loads(resources.files("dflash_eval").joinpath("data", name).read_text(encoding="utf-8"))


def _key(name_or_id: str) -> str:
    """The part after the org, lower-cased: "Qwen/Qwen3-8B" and "/models/qwen3-8b/" -> "qwen3-8b"."""
    return name_or_id.replace("\\", "/").rstrip("/").split("/")[-1].lower()


def _target_names(target: str) -> list[str]:
    """Names a target may be known by, most trustworthy first.

    For an existing local folder: the repo id of an HF cache folder (`models--Org--Name/snapshots/<sha>`), then
    `_name_or_path` from its config.json, then the folder's own name. Otherwise the string itself (a repo id).
    """
    path = Path(os.path.expanduser(target))
    if not path.exists():
        return [target]
    names: list[str] = []
    for part in (path, *path.parents):
        if part.name.startswith("models--"):
            names.append(part.name[len("models--"):].replace("--", "/"))
            break
    config = path / "config.json"
    if config.is_file():
        try:
            from ..core.errors import loads, read_text

            recorded = loads(read_text(config)).get("_name_or_path")
        except (OSError, ValueError, AttributeError):
            recorded = None
        if isinstance(recorded, str) and recorded.strip():
            names.append(recorded.strip())
    names.append(path.name)
    return names


def _match_target(target: str, candidates: list[str]) -> str | None:
    """The first of `candidates` (HF repo ids) that `target` names, or None."""
    by_key = {_key(c): c for c in candidates}
    for name in _target_names(target):
        if _key(name) in by_key:
            return by_key[_key(name)]
    return None


def zlab_reference_for(target: str) -> str:
    """The z-lab drafter repo id for `target` (an HF repo id, a local folder, or an HF cache snapshot)."""
    pairs = {p["target"]: p["drafter"] for p in _data("zlab_drafters.json")["pairs"]}
    known = _match_target(str(target), list(pairs))
    if known is None:
        raise InputError(target, f"no published z-lab drafter for this target (known targets: {', '.join(pairs)}); "
                                 "give a reference checkpoint folder instead: --reference PATH or PATH:NAME")
    return pairs[known]


def _offline() -> bool:
    from huggingface_hub import constants

    env = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE") or ""
    return env.upper() in _TRUE or bool(constants.HF_HUB_OFFLINE)


def _cached_snapshot(repo_id: str, cache_dir: str | Path | None) -> Path:
    """The cached snapshot folder of `repo_id` (refs/main -> snapshots/<sha>); raises if missing or incomplete."""
    from huggingface_hub import snapshot_download

    return Path(snapshot_download(repo_id, local_files_only=True, cache_dir=cache_dir))


def resolve_zlab_reference(target: str, cache_dir: str | Path | None = None) -> Path:
    """The local folder of z-lab's drafter for `target`: from the HF cache when offline, else downloaded.

    A download is attempted only when HF_HUB_OFFLINE is not set; if it fails for any reason the cache is
    tried. A miss is one `InputError` line with the command that fetches the drafter.
    """
    repo_id = zlab_reference_for(target)
    hint = f"download it with: hf download {repo_id}"
    failure = None
    if not _offline():
        from huggingface_hub import snapshot_download

        try:
            return Path(snapshot_download(repo_id, cache_dir=cache_dir))
        except Exception as error:  # any failure falls back to the cache
            failure = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}".rstrip(": ")
    try:
        return _cached_snapshot(repo_id, cache_dir)
    except Exception as error:  # any cache miss becomes one clear message
        if type(error).__name__ == "IncompleteSnapshotError":
            problem = f"the cached snapshot of the z-lab reference drafter for {target} is incomplete; {hint}"
        elif failure is None:
            problem = f"z-lab reference drafter for {target} is not in the Hugging Face cache (offline); {hint}"
        else:
            problem = (f"z-lab reference drafter for {target} could not be downloaded ({failure}) and is not in "
                       f"the Hugging Face cache; {hint}")
        raise InputError(repo_id, problem) from None


def resolve_recorded_verifier(drafter_dir: str | Path, name_or_path: str,
                              cache_dir: str | Path | None = None) -> Path:
    """The verifier a speculators drafter recorded (`speculators_config.verifier.name_or_path`), on disk.

    Tried in order: as given (absolute, or relative to the working directory), relative to the drafter
    folder, then as an HF repo id in the local cache (never downloads).
    """
    drafter_dir = Path(drafter_dir)
    as_given = Path(os.path.expanduser(name_or_path))
    if as_given.exists():
        return as_given
    beside = drafter_dir / name_or_path
    if not as_given.is_absolute() and beside.exists():
        return beside
    looks_like_repo = name_or_path.count("/") == 1 and not name_or_path.startswith((".", "/", "~"))
    if looks_like_repo:
        try:
            return _cached_snapshot(name_or_path, cache_dir)
        except Exception:  # a miss is reported below
            pass
    problem = (f"the verifier it records ({name_or_path}, speculators_config.verifier.name_or_path) is not a "
               "local folder, not a folder relative to the drafter, and not in the Hugging Face cache")
    if looks_like_repo:
        problem += f"; download it with: hf download {name_or_path}, or pass the target explicitly"
    else:
        problem += "; pass the target explicitly"
    raise InputError(drafter_dir, problem)


def verifier_warning(drafter_dir: str | Path, name_or_path: str, name: str, target: Path,
                     cache_dir: str | Path | None = None) -> str | None:
    """With an explicit --target, which always wins: a warning when the drafter's recorded verifier is another
    model or cannot be found here (a checkpoint trained elsewhere records the trainer's path); None when it
    is the target itself, by content: the same folder, or one with the same config.json and weight bytes (a
    copy of the target, files.same_model_files)."""
    from .files import same_model_files

    try:
        verifier = resolve_recorded_verifier(drafter_dir, name_or_path).resolve()
    except InputError:
        return (f"drafter {name} records verifier {name_or_path}, which is not found here; evaluating against "
                f"--target {target} as given")
    if verifier == Path(target).resolve() or same_model_files(verifier, Path(target), cache_dir):
        return None
    return f"drafter {name} records verifier {verifier}, but --target is {target} (another config or other weights)"


def _norm_dataset(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())  # "MT_Bench" == "mt-bench"


def published_tau(target: str, dataset: str, drafter_family: str = "DFlash", temperature: float = 0) -> float | None:
    """The DFlash paper's tau (mean acceptance length incl. bonus token) for a target and dataset, or None.

    `drafter_family` is matched case-insensitively inside the paper's drafter label ("DFlash" matches
    "z-lab/Qwen3-8B-DFlash-b16", "EAGLE-3" the EAGLE-3 baseline). `target` may be a repo id or a local folder.
    """
    entries = [e for e in _data("published_tau.json")["entries"]
               if drafter_family.lower() in e["drafter"].lower()
               and _norm_dataset(e["dataset"]) == _norm_dataset(dataset)
               and float(e["temperature"]) == float(temperature)]
    known = _match_target(str(target), [e["target"] for e in entries])
    if known is None:
        return None
    return next(float(e["tau"]) for e in entries if e["target"] == known)


def published_tau_source() -> str:
    """Where the published numbers come from and under which settings (for report footnotes)."""
    return _data("published_tau.json")["source"]


def zlab_trained_thinking(drafter_repo: str) -> bool | None:
    """How a published z-lab drafter was trained, when the registry knows: the Qwen3 b16 drafters without
    thinking ("non-thinking" in the README table), the Qwen3.5/3.6 drafters with it (primer section 7)."""
    for pair in _data("zlab_drafters.json")["pairs"]:
        if _key(pair["drafter"]) == _key(drafter_repo):
            if "non-thinking" in (pair.get("note") or ""):
                return False
            return True if _key(pair["target"]).startswith(("qwen/qwen3.5", "qwen/qwen3.6")) else None
    return None


def published_comparison(provenance: dict, block_sizes: list[int]) -> list[str]:
    """One line per prompt set of a run whose target and temperature the DFlash paper's table has: the
    paper's tau (z-lab drafter) and every setting of this run that differs from the paper's (thinking off,
    2048 new tokens, B = 16, z-lab's loop sampling its drafts at temperature > 0)."""
    target = provenance.get("target") or {}
    temperature = float(provenance.get("temperature") or 0)
    lines = []
    for prompt_set in (provenance.get("prompts") or {}).get("sets") or {}:
        tau = None
        for name in (target.get("name"), target.get("path")):
            tau = published_tau(str(name), prompt_set, temperature=temperature) if name else None
            if tau is not None:
                break
        if tau is None:
            continue
        differs = settings_differ(provenance, block_sizes, "paper", prompt_set)  # formats/published.py
        lines.append(f"paper tau for {prompt_set} at temperature {temperature:g} (z-lab drafter): {tau:.2f}; "
                     + ("settings that differ: " + "; ".join(differs) if differs else "same settings"))
    return lines
