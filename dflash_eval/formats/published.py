"""The published numbers a run is held against: which published pair a run's target and drafter are, and the
band of published tau for each of its prompt sets, with the settings that differ and where the run falls.

Tables (package data, each file with its `source` line; tests/test_published.py reads them back against the
shared copies):
- `published_tau.json`: the DFlash paper's main table (chain tau, z-lab drafters and an EAGLE-3 baseline);
- `published_tau_ddtree.json`: DDTree's table (liranringel/ddtree `src/data/results.tex`), chain and
  best-budget tree tau for z-lab's Qwen3-4B/8B/Coder-30B-A3B drafters;
- `vllm_ci_floors.json`: vLLM CI's floors for z-lab/Qwen3-8B-DFlash-b16 (vllm #40727), vLLM's pooled tau.

A pair is recognised by name, from what run.json recorded (no file is read): the Hugging Face cache snapshot
a model was loaded from (`models--ORG--NAME/snapshots/COMMIT`, the strongest: repository and revision), the
repository id it was given by, or its folder's name. Both the target and the drafter must name one published
pair; a published drafter on an unrecognised target gets a line saying so and no band.

The band of a prompt set is the span of the chain tau the tables publish for the pair, set and temperature
(paper and DDTree: both z-lab's definition, macro over prompts); the run's tau macro is inside it when its 95%
interval meets the span, below or above otherwise (core/bands.py). Tree tau (DDTree's best budget) is listed
apart, never in the chain band; a run's own tree results are shown beside them when the drafter carries them
(`TREE_KEY`: `run --tree-budgets`'s `tree` of the drafter document). vLLM's floors are vLLM's pooled definition and are
held against the run's tau micro, said so.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from importlib import resources
from typing import Any

from ..core.bands import position, span
from ..core.tau_definitions import DEFINITIONS
from .benchmark_sets import PAPER_ROWS, paper_difference

TABLES = {"paper": "published_tau.json", "ddtree": "published_tau_ddtree.json", "vllm_ci": "vllm_ci_floors.json"}
SOURCE_LABELS = {"paper": "DFlash paper (arXiv 2602.06036)", "ddtree": "DDTree table (liranringel/ddtree)",
                 "vllm_ci": "vLLM CI floor (vllm #40727)"}
# what each source ran under, against which a run's settings are compared (None: the source does not say)
SOURCE_SETTINGS = {
    "paper": {"max_new_tokens": 2048, "thinking": False, "block_size": 16, "harness": "z-lab's benchmark.py "
              "(transformers backend, live loop, the paper's prompt draw)"},
    "ddtree": {"max_new_tokens": None, "thinking": False, "block_size": 16, "harness": "DDTree's benchmark "
               "(z-lab's datasets and draw, transformers backend)"},
    "vllm_ci": {"max_new_tokens": None, "thinking": None, "block_size": 16, "harness": "a vLLM server in CI "
                "(vLLM's pooled tau, its own prompts)"},
}
DATASET_ALIASES = {"swebenchlite": "swebench", "mtbench": "mtbench"}
# where a drafter document keeps its tree verification (core/tree.py, `run --tree-budgets`): drafter["tree"]["by_budget"],
# [{"budget": int, "metrics": Metrics, ...}] (core/documents.TreeDocument)
TREE_KEY = "tree"


@lru_cache(maxsize=None)
def table(name: str) -> dict:
    """A published table as shipped in the package (TABLES)."""
    return json.loads(resources.files("dflash_eval").joinpath("data", TABLES[name]).read_text(encoding="utf-8"))


def dataset_key(name: str) -> str:
    """'MT_Bench', 'mt-bench' -> 'mtbench'; DDTree's 'swe-bench-lite' is the paper's 'swe-bench'."""
    key = re.sub(r"[^a-z0-9]", "", str(name).lower())
    return DATASET_ALIASES.get(key, key)


def _repo_key(name: str) -> str:
    return str(name).replace("\\", "/").rstrip("/").split("/")[-1].lower()


def published_pairs() -> list[tuple[str, str]]:
    """(target repo, drafter repo) of every pair some table publishes, z-lab's DFlash drafters first."""
    pairs: list[tuple[str, str]] = []
    for name in ("paper", "ddtree", "vllm_ci"):
        for e in table(name)["entries"]:
            drafter = e["drafter"]
            if drafter.startswith("EAGLE-3 ("):  # the paper labels its baseline "EAGLE-3 (repo)"
                drafter = drafter[len("EAGLE-3 ("):-1]
            if (e["target"], drafter) not in pairs:
                pairs.append((e["target"], drafter))
    return pairs


def _names(document: dict[str, Any] | None, *, display: str | None = None) -> list[tuple[str, str]]:
    """(name, how it was recorded) a model is known by in run.json, most trustworthy first."""
    document = document or {}
    out = []
    snapshot = document.get("snapshot") or {}
    if snapshot.get("repo"):
        out.append((snapshot["repo"], f"Hugging Face cache snapshot {snapshot['repo']} at revision "
                                      f"{str(snapshot.get('revision', '?'))[:12]}"))
    name, path = document.get("name"), document.get("path")
    if name and str(name).count("/") == 1 and not str(name).startswith((".", "/", "~")):
        out.append((str(name), f"repository id {name}"))
    if path:
        out.append((str(path), f"folder name {_repo_key(path)}"))
    if display:
        out.append((display, f"drafter name {display}"))
    return out


def identify(provenance: dict[str, Any], drafter: dict[str, Any]) -> dict[str, Any] | None:
    """The published pair a run's target and this drafter are, by name: {"target", "drafter", "how"}, with
    "target" None when only the drafter is recognised; None when the drafter is no published one."""
    pairs = published_pairs()
    by_drafter = {_repo_key(d): (t, d) for t, d in pairs}
    found = next(((by_drafter[_repo_key(n)], how) for n, how in _names(drafter, display=drafter.get("name"))
                  if _repo_key(n) in by_drafter), None)
    if found is None:
        return None
    (target, repo), how = found
    target_how = next((h for n, h in _names(provenance.get("target")) if _repo_key(n) == _repo_key(target)), None)
    return {"target": target if target_how else None, "drafter": repo, "expected_target": target,
            "how": f"drafter by {how}" + (f"; target by {target_how}" if target_how else "")}


def _entries(pair: dict[str, Any], dataset: str, temperature: float) -> dict[str, list[dict[str, Any]]]:
    """The tables' entries for the pair, set and temperature, by source."""
    out: dict[str, list[dict[str, Any]]] = {"chain": [], "tree": [], "floors": []}
    for name in ("paper", "ddtree", "vllm_ci"):
        for e in table(name)["entries"]:
            drafter = e["drafter"].removeprefix("EAGLE-3 (").removesuffix(")")
            if (e["target"], drafter) != (pair["target"], pair["drafter"]) or dataset_key(e["dataset"]) != \
                    dataset_key(dataset) or float(e["temperature"]) != float(temperature):
                continue
            entry = {"source": SOURCE_LABELS[name], "table": name, "dataset": e["dataset"]}
            if name == "vllm_ci":
                out["floors"].append({**entry, "floor": e["floor"], "measured": e["measured"], "definition": "vllm"})
            elif e.get("verification", "chain") == "chain":
                out["chain"].append({**entry, "tau": e["tau"], "definition": "zlab"})
            else:
                out["tree"].append({**entry, "tau": e["tau"], "verification": e["verification"],
                                    "budgets_searched": e.get("budgets_searched"), "definition": "zlab"})
    return out


def settings_differ(provenance: dict[str, Any], block_sizes: list[int], source: str, dataset: str) -> list[str]:
    """Every setting of the run that differs from what `source` ran under (SOURCE_SETTINGS): thinking, max new
    tokens, block size, the prompts (count and draw, benchmark_sets.paper_difference), the harness; at
    temperature > 0 the draft policy, top-p/top-k and the offline estimate. One home for the rule: the paper
    line (references.published_comparison) and the bands read it."""
    ref = SOURCE_SETTINGS[source]
    temperature = float(provenance.get("temperature") or 0)
    sampling = provenance.get("sampling") or {}
    differs = []
    label = "paper" if source == "paper" else SOURCE_LABELS[source].split(" (")[0]
    if ref["thinking"] is not None and bool(provenance.get("enable_thinking")) != ref["thinking"]:
        differs.append(f"thinking {'on' if provenance.get('enable_thinking') else 'off'} "
                       f"({label}: {'on' if ref['thinking'] else 'off'})")
    if ref["max_new_tokens"] is not None and provenance.get("max_new_tokens") != ref["max_new_tokens"]:
        differs.append(f"max_new_tokens {provenance.get('max_new_tokens')} ({label}: {ref['max_new_tokens']})")
    elif ref["max_new_tokens"] is None:
        differs.append(f"max_new_tokens {provenance.get('max_new_tokens')} ({label}: not stated)")
    if any(b != ref["block_size"] for b in block_sizes):
        differs.append(f"block size {sorted(set(block_sizes))} ({label}: {ref['block_size']})")
    if temperature > 0 and sampling.get("draft_policy") not in (None, "sample"):
        differs.append(f"draft policy {sampling.get('draft_policy')} ({label}: z-lab's loop samples drafts)")
    if sampling.get("top_p", 1.0) != 1.0 or sampling.get("top_k", 0):
        differs.append(f"top-p/top-k set ({label}: plain temperature)")
    if provenance.get("estimate"):
        differs.append(f"offline estimate ({label}: the live loop)")
    if source in ("paper", "ddtree"):
        rows = paper_difference(provenance.get("prompts") or {}, next(
            (n for n in PAPER_ROWS if dataset_key(n) == dataset_key(dataset)), dataset))
        if rows:
            differs.append(rows)
    else:
        differs.append(f"harness: {ref['harness']}; prompts: the run's {(provenance.get('prompts') or {}).get('sets', {}).get(dataset, '?')} {dataset} prompts")
    return differs


def _run_metrics(drafter: dict[str, Any], dataset: str, sets: list[str]) -> dict[str, Any] | None:
    """The drafter's metrics on one prompt set: its by_prompt_set entry, or its whole metrics when the run
    has that one set only."""
    by_set = drafter.get("by_prompt_set") or {}
    if dataset in by_set:
        return by_set[dataset]
    return drafter.get("metrics") if sets == [dataset] else None


def _tree_runs(drafter: dict[str, Any], dataset: str, sets: list[str]) -> list[dict[str, Any]]:
    """The drafter's own tree results ({"budget", "tau_macro", "tau_macro_ci"}) when it carries them."""
    rows = []
    for entry in (drafter.get(TREE_KEY) or {}).get("by_budget") or []:
        m = entry.get("metrics") or {}
        by_set = entry.get("by_prompt_set") or {}
        if dataset in by_set:
            m = by_set[dataset]
        elif sets != [dataset]:
            continue
        rows.append({"budget": entry.get("budget"), "tau_macro": m.get("tau_macro"),
                     "tau_macro_ci": m.get("tau_macro_ci")})
    return rows


def bands_for(run: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """drafter name -> its band documents, one per prompt set of the run (module docstring); a drafter that
    is no published one has none. Each: pair, identified (how), dataset, temperature, chain (published
    entries), band [low, high], run {tau_macro, ci, definition}, position, differs, tree, tree_run, floors,
    and `line` (what the reports print)."""
    prov = run.get("provenance") or {}
    temperature = float(prov.get("temperature") or 0)
    sets = list((prov.get("prompts") or {}).get("sets") or {})
    out: dict[str, list[dict[str, Any]]] = {}
    for d in run.get("drafters") or []:
        pair = identify(prov, d)
        if pair is None:
            continue
        block = [(d.get("spec") or {}).get("block_size", 0)]
        docs = []
        if pair["target"] is None:
            target = prov.get("target") or {}
            docs.append({"pair": pair, "dataset": None, "line": (
                f"{d['name']} is the published {pair['drafter']} ({pair['how']}), but the target "
                f"{target.get('name') or target.get('path')} is not recognised as {pair['expected_target']} (load it "
                "by its repository id or from the Hugging Face cache): no published band")})
            out[d["name"]] = docs
            continue
        for dataset in sets:
            found = _entries(pair, dataset, temperature)
            m = _run_metrics(d, dataset, sets)
            doc: dict[str, Any] = {"pair": {"target": pair["target"], "drafter": pair["drafter"]},
                                   "identified": pair["how"], "dataset": dataset, "temperature": temperature,
                                   "chain": found["chain"], "tree": found["tree"], "floors": [],
                                   "band": None, "position": None, "differs": {},
                                   "run": {"tau_macro": (m or {}).get("tau_macro"),
                                           "tau_macro_ci": (m or {}).get("tau_macro_ci"),
                                           "tau_micro": (m or {}).get("tau_micro"),
                                           "definition": DEFINITIONS["zlab"].to_dict()},
                                   "tree_run": _tree_runs(d, dataset, sets)}
            if found["chain"]:
                doc["band"] = span([e["tau"] for e in found["chain"]])
                if m is not None and m.get("tau_macro") is not None:
                    doc["position"] = position(m["tau_macro"], m.get("tau_macro_ci"), doc["band"])
                for e in found["chain"]:
                    doc["differs"][e["table"]] = settings_differ(prov, block, e["table"], dataset)
            for f in found["floors"]:
                micro = (m or {}).get("tau_micro")
                doc["floors"].append({**f, "run_tau_micro": micro,
                                      "position": None if micro is None else "above" if micro >= f["floor"]
                                      else "below", "differs": settings_differ(prov, block, "vllm_ci", dataset)})
            doc["line"] = band_line(d["name"], doc)
            docs.append(doc)
        out[d["name"]] = docs
    return out


def _merged(differs: dict[str, list[str]]) -> list[str]:
    """One line per setting across the sources: 'block size [8] (paper, DDTree table: 16)'."""
    grouped: dict[tuple[str, str], list[str]] = {}
    plain: list[str] = []
    for lines in differs.values():
        for line in lines:
            found = re.match(r"^(.*) \(([^:()]+): (.*)\)$", line)
            if found is None:
                plain.append(line)
                continue
            labels = grouped.setdefault((found.group(1), found.group(3)), [])
            if found.group(2) not in labels:
                labels.append(found.group(2))
    merged = [f"{what} ({', '.join(labels)}: {value})" for (what, value), labels in grouped.items()]
    return sorted(set(merged)) + sorted(set(plain))


def _ci(run: dict[str, Any]) -> str:
    ci = run.get("tau_macro_ci")
    return f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else " (no interval)"


def band_line(name: str, doc: dict[str, Any]) -> str:
    """One line (plain text; the renderers escape it): the published chain band, where the run is, the
    settings that differ, and the tree and floor entries."""
    pair, run = doc["pair"], doc["run"]
    head = f"published {pair['drafter']} on {pair['target']}, {doc['dataset']} at temperature {doc['temperature']:g}"
    if not doc["chain"] and not doc["tree"] and not doc["floors"]:
        return f"{head}: no published tau for this set (identified: {doc['identified']})"
    parts = []
    if doc["chain"]:
        values = ", ".join(f"{e['tau']:.2f} {e['source']}" for e in doc["chain"])
        low, high = doc["band"]
        band = f"{low:.2f}" if low == high else f"{low:.2f}-{high:.2f}"
        where = {"inside": "INSIDE", "above": "ABOVE", "below": "BELOW", None: "not measured"}[doc["position"]]
        tau = "-" if run["tau_macro"] is None else f"{run['tau_macro']:.2f}{_ci(run)}"
        parts.append(f"chain tau band {band} ({values}; accepted + 1 per step, macro over prompts); this run "
                     f"{tau}: {where} the band")
        differs = _merged(doc["differs"])
        parts.append("settings that differ: " + ("; ".join(differs) if differs else "none"))
    for t in doc["tree"]:
        budgets = t.get("budgets_searched") or []
        mine = ", ".join(f"budget {r['budget']}: {r['tau_macro']:.2f}" for r in doc["tree_run"]
                         if r.get("tau_macro") is not None) or "no tree results in this run"
        parts.append(f"tree tau {t['tau']:.2f} ({t['source']}, best budget of {budgets[0]}..{budgets[-1]}; not "
                     f"comparable with chain tau); this run: {mine}" if budgets else
                     f"tree tau {t['tau']:.2f} ({t['source']}); this run: {mine}")
    for f in doc["floors"]:
        micro = "-" if f["run_tau_micro"] is None else f"{f['run_tau_micro']:.2f}"
        parts.append(f"{f['source']} >= {f['floor']:.2f} (measured {'-'.join(f'{x:.2f}' for x in f['measured'])}; "
                     f"vLLM's 1 + accepted / drafts pooled over steps): this run's tau micro {micro}"
                     + (f" is {f['position'].upper()} it" if f["position"] else ""))
    return f"{head} ({doc['identified']}): " + "; ".join(parts)
