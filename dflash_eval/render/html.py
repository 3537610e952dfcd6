"""HTML export of a run's report and of a diff: one self-contained file that opens anywhere, offline.

The file is what people attach to a discussion or a training log, so it must not depend on anything but
itself: no CDN script, web font, image or stylesheet is referenced, and a Content-Security-Policy meta tag
(`default-src 'none'`) makes the browser refuse any fetch that might still slip in. The page is built from
Jinja2 templates shipped in the package (`render/templates/`) with autoescaping on: every string from a run
(drafter and prompt names, paths, decoded tokens, warnings) is escaped by the template engine; no HTML is
assembled by string concatenation here. The only markup inserted unescaped (`|safe`) is chart SVG produced
by matplotlib, after `_clean_svg` has removed its XML prolog, DOCTYPE, metadata and comments.
The one inline script (sortable tables, pagination, jump-to-prompt) is a static file of the package; the CSP
allows exactly that script by its sha256, so even an escaping bug could not run an injected `<script>`.

Charts: matplotlib, rendered to inline SVG, rather than plotly.
- File size: a plotly chart needs plotly.js embedded (3.5 MB or more minified) to work offline, before any
  data; matplotlib's SVG of one chart is 30-100 KB (glyphs are defined once per chart and reused), so the
  report of a 164-prompt, 3-drafter, B = 16 run is about 1.8 MB (benchmarks/html_size.py), 80% of it the
  decoded samples, and a small run's is about 0.2 MB.
- Offline: SVG is plain markup in the page, drawn by the browser with no script at all; text is converted
  to paths (`svg.fonttype = "path"`), so no font is referenced and the charts look identical everywhere,
  including in a mail client's or a code-review tool's preview that runs no JavaScript.
- Interactivity: plotly would add hover and zoom. What a reader needs exact values for is in sortable
  tables next to each chart (summary, per slot, per prompt, repetition), and the per-prompt table links to
  the decoded samples of each prompt. That trade is worth the 3.5 MB and the dependency on a script.
- Reproducible: dates are dropped from the SVG metadata and `svg.hashsalt` is fixed, so the same run gives
  the same file byte for byte.
Figures are built with `matplotlib.figure.Figure` directly (never pyplot): no GUI backend, no global state.

Samples stay readable on large runs: per drafter the worst `WORST_BLOCKS` blocks (as `samples.select_blocks`
picks them for the terminal), then one collapsed `<details>` per prompt with its first `PROMPT_BLOCKS`
blocks per drafter, paginated by the inline script (without script, everything is simply listed).
"""

from __future__ import annotations

import base64
import hashlib
import math
import shlex
from functools import lru_cache
from pathlib import Path
from typing import Any

from ..core.documents.results import atomic_write
from ..core.documents.row_documents import SampleRow
from ..core.documents.run_document import DrafterDocument, RunDocument
from ..core.samples import select_blocks, walk_blocks
from ..formats import published, references
from .breakdown import breakdown_view
from .charts import (
    PALETTE,
    chart_label,
    chart_legend,
    chart_style,
    delta_chart,
    diff_histogram_chart,
    diff_slot_chart,
    figure_to_svg,
    histogram_chart,
    new_figure,
    none_as_nan,
    prompt_chart,
    repetition_chart,
    slot_chart,
    tau_chart,
)
from .draft_lengths import SPEEDUP_NOTE, draft_length_diff_view, serving_view
from .html_blocks import block_cells, natural, pair_block, view_block, visible_text
from .terminal import ESTIMATE_PER_ANCHOR, SAMPLE_LEGEND, legend_for, walk_words
from .tree import tree_diff_view, tree_view

WORST_BLOCKS = 20  # worst blocks shown per drafter
PROMPT_BLOCKS = 3  # first blocks per drafter in each prompt's collapsed section
PAGE_PROMPTS = 20  # prompts per page in the per-prompt samples
PAGE_ROWS = 25  # rows per page in the per-prompt table


EXTRA_LEGEND = (
    ("token acceptance rate", "accepted draft tokens / drafted tokens (bonus tokens excluded); vLLM's draft "
                              "acceptance rate"),
    ("per-prompt tau", "one prompt's committed tokens / steps; tau macro is their mean"),
    ("paper tau", "the DFlash paper's tau for this target and prompt set (z-lab drafter, B = 16, greedy, thinking "
                  "off), drawn as a dashed reference on the tau chart when known"),
    ("mean n inside / outside flagged", "mean accepted draft tokens per block, in flagged and in clean blocks"),
    ("delta B - A [95% CI]", "paired over prompts: bootstrap interval of the difference, permutation-test p"),
)


# ----------------------------------------------------------------------------------------------- templates

@lru_cache(maxsize=1)
def template_env():
    from jinja2 import Environment, PackageLoader, StrictUndefined

    env = Environment(loader=PackageLoader("dflash_eval", "render/templates"), autoescape=True,
                      undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True, finalize=visible_text)
    env.filters["num"] = _num
    env.filters["signed"] = _signed
    env.filters["pct"] = _pct
    return env


def _num(value, digits: int = 2) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return f"{value:.{digits}f}"


def _signed(value, digits: int = 3) -> str:
    return "–" if value is None else f"{value:+.{digits}f}"


def _pct(value, digits: int = 1) -> str:
    return "–" if value is None else f"{100 * value:.{digits}f}%"


def _static(name: str) -> str:
    """A static template (the script): rendered exactly as `{% include %}` puts it into the page."""
    return template_env().get_template(name).render()


def content_security_policy() -> str:
    digest = base64.b64encode(hashlib.sha256(_static("report.js").encode()).digest()).decode()
    return (f"default-src 'none'; script-src 'sha256-{digest}'; style-src 'unsafe-inline'; img-src data:; "
            "font-src data:; base-uri 'none'; form-action 'none'")


ESTIMATE_LEGEND = (
    ("tau estimate macro / micro", "as tau macro / micro, from the expected steps and committed tokens of each "
                                   "sampled continuation's walk (see the definition above the table)"),
    ("E[tau] per anchor", ESTIMATE_PER_ANCHOR),
    ("alpha i", "acceptance probability of slot i given the earlier slots were accepted: sum over tokens of "
                "min(p target, q drafter), averaged over every anchor"),
    ("expected reach", "E[prod alpha_j, j <= i]: the chance a step's accepted prefix reaches slot i"),
    ("anchors", "positions of the sampled continuations taken as anchors, over all prompts and samples"),
)


def render_page(template: str, legend=None, **context) -> str:
    return template_env().get_template(template).render(csp=content_security_policy(), legend=legend if legend is not None else run_legend(),
                                                **context)


def run_legend(run: RunDocument | None = None) -> list[tuple[str, str]]:
    """The run's legend in its own words (the loop its steps come from; n/a cells in live mode)."""
    return [*legend_for(run), *EXTRA_LEGEND]


def _sample_legend() -> str:
    from rich.text import Text

    return Text.from_markup(SAMPLE_LEGEND).plain


def write_html(path: Path, html: str) -> Path:
    """Write beside, then rename (a crash never leaves half a report); creates missing parent folders. A
    write the system refuses (a full disk) is one line naming the file (core/documents/results.atomic_write)."""
    from ..core.errors import InputError

    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(path.parent, f"cannot create the folder: {exc.strerror or exc}") from None
    atomic_write(path, html)
    return path


# ------------------------------------------------------------------------------------------------- charts


# ------------------------------------------------------------------------------------------- view models


def _per_prompt_tau(drafter: DrafterDocument, rows: list[SampleRow]) -> dict[str, float]:
    per_prompt = (drafter.get("counts") or {}).get("per_prompt")
    if per_prompt is None:  # older or partial run.json: from the rows' own counts
        per_prompt = {}
        for row in rows:
            if row["drafter"] == drafter["name"]:
                per_prompt.update((row.get("counts") or {}).get("per_prompt") or {})
    return {pid: committed / steps for pid, (steps, committed) in per_prompt.items() if steps}


def _fmt_value(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, dict):
        return ", ".join(f"{k}: {_fmt_value(v)}" for k, v in value.items()) or "none"
    if isinstance(value, (list, tuple)):
        return ", ".join(_fmt_value(v) for v in value) or "none"
    return str(value)


def _agreement(value: dict | None) -> str:
    if not value or not value.get("total"):
        return "–"
    return f"{value['agree']}/{value['total']} ({100 * value['agree'] / value['total']:.2f}%)"


def _provenance(run: RunDocument) -> list[tuple[str, list[tuple[str, str]]]]:
    prov = run["provenance"]
    target = prov.get("target") or {}
    prompts = prov.get("prompts") or {}
    return [
        ("target", [
            ("name", _fmt_value(target.get("name"))), ("path", _fmt_value(target.get("path"))),
            ("model type", _fmt_value(target.get("model_type"))),
            ("shape", f"{target.get('num_layers')} layers, hidden {target.get('hidden_size')}, "
                      f"vocab {target.get('vocab_size')}"),
            ("fingerprint", _fmt_value(target.get("fingerprint"))),
            ("tokenizer hash", _fmt_value(prov.get("tokenizer_hash"))),
            ("chat template hash", _fmt_value(prov.get("chat_template_hash"))),
        ]),
        ("settings", [
            ("prompts", f"{prompts.get('count')} from {prompts.get('source')} "
                        f"({_fmt_value(prompts.get('sets'))})"),
            ("max_new_tokens", _fmt_value(prov.get("max_new_tokens"))),
            ("thinking", _fmt_value(prov.get("enable_thinking"))
                         + (f" ({prov['thinking_source']})" if prov.get("thinking_source") else "")),
            ("temperature", _fmt_value(prov.get("temperature"))),
            ("mode", _fmt_value(prov.get("mode"))), ("final block", _fmt_value(prov.get("final_block"))),
            ("continuations", _fmt_value(prov.get("continuations"))),
            ("dtype, device", f"{prov.get('dtype')}, {prov.get('device')}"),
            ("kernels", _fmt_value(prov.get("kernels")) if prov.get("kernels") else "none (dense target)"),
            # with --responses the count says how greedy the given continuations are: not a sanity check
            *([("responses vs target argmax", _agreement(prov.get("responses_agreement")))]
              if prov.get("responses_agreement") else [("self-consistency", _agreement(prov.get("self_consistency")))]),
        ]),
        ("versions", [
            ("dflash-eval", _fmt_value(prov.get("dflash_eval"))), ("git sha", _fmt_value(prov.get("git_sha"))),
            ("torch", _fmt_value(prov.get("torch"))), ("transformers", _fmt_value(prov.get("transformers"))),
            ("python", _fmt_value(prov.get("python"))), ("created", _fmt_value(prov.get("created"))),
            ("command", shlex.join(map(str, prov.get("argv") or [])) or "–"),
            ("work", _fmt_value(prov.get("work"))),
        ]),
    ]


def _paper_taus(prov: dict, sets: list[str]) -> dict[str, float]:
    target = prov.get("target") or {}
    found = {}
    for prompt_set in sets:
        for name in (target.get("name"), target.get("path")):
            tau = references.published_tau(str(name), prompt_set) if name else None
            if tau is not None:
                found[prompt_set] = tau
                break
    return found


def page_title(run: RunDocument, view: dict[str, Any]) -> str:
    """The page's title names the drafters compared (not the target's path): 'dflash-eval: mine vs z-lab on
    Qwen3-8B', the target by its last path part."""
    target = str((run["provenance"].get("target") or {}).get("name") or "")
    short = target if target.count("/") <= 1 and not target.startswith((".", "/", "~")) else Path(target).name
    return f"dflash-eval: {view['title']}" + (f" on {short}" if short else "")


def _run_context(run: RunDocument, rows: list[SampleRow], title: str | None, run_dir: str | None = None) -> dict[str, Any]:
    from ..core.verdict import verdict_block

    prov = run["provenance"]
    verdict = verdict_block(run, run_dir, bands=published.bands_for(run))
    drafters = [{**d, "color": PALETTE[i % len(PALETTE)]} for i, d in enumerate(run["drafters"])]
    names = [d["name"] for d in drafters]
    sets = list((prov.get("prompts") or {}).get("sets") or {})
    for d in drafters:
        sets += [s for s in d.get("by_prompt_set") or {} if s not in sets]
    paper = _paper_taus(prov, sets)
    best = max((d["metrics"]["tau_macro"] for d in drafters if d["metrics"]["tau_macro"] is not None), default=None)

    summary = [{"name": d["name"], "color": d["color"], "m": d["metrics"],
                "best": len(drafters) > 1 and best is not None and d["metrics"]["tau_macro"] == best,
                "format": d.get("format"), "block_size": (d.get("spec") or {}).get("block_size")} for d in drafters]
    by_set = [{"name": d["name"], "color": d["color"], "set": s, "m": m, "paper": paper.get(s)}
              for d in drafters for s, m in (d.get("by_prompt_set") or {}).items()]

    groups = list(sets) if sets else ["all"]
    if len(sets) > 1:
        groups = ["all", *sets]
    bars = []
    for d in drafters:
        tau, ci = {}, {}
        for group in groups:
            m = d["metrics"] if group == "all" or len(sets) <= 1 else (d.get("by_prompt_set") or {}).get(group)
            if m and m.get("tau_macro") is not None:
                tau[group], ci[group] = m["tau_macro"], m.get("tau_macro_ci")
        bars.append({"name": d["name"], "color": d["color"], "tau": tau, "ci": ci})
    refs = {g: paper[g] for g in groups if g in paper}

    per_prompt = {d["name"]: _per_prompt_tau(d, rows) for d in drafters}
    flagged = {d["name"]: ((d.get("repetition") or {}).get("counts") or {}).get("per_prompt") or {} for d in drafters}
    prompt_set_of = {row["prompt_id"]: row.get("prompt_set", "") for row in rows}
    prompt_ids = sorted({pid for taus in per_prompt.values() for pid in taus} | set(prompt_set_of), key=natural)
    anchor = {pid: f"p{i}" for i, pid in enumerate(prompt_ids)}
    prompt_rows = []
    for pid in prompt_ids:
        cells = []
        for name in names:
            tau = per_prompt[name].get(pid)
            flag = flagged[name].get(pid)
            share = flag[0] / flag[1] if flag and flag[1] else None
            cells.append({"tau": tau, "flagged": share})
        taus = [c["tau"] for c in cells if c["tau"] is not None]
        prompt_rows.append({"id": pid, "anchor": anchor[pid], "set": prompt_set_of.get(pid, pid.split("/")[0]),
                            "cells": cells, "spread": max(taus) - min(taus) if len(taus) > 1 else None})

    repetition = []
    for d in drafters:
        rep = d.get("repetition")
        repetition.append({"name": d["name"], "color": d["color"], "rep": rep,
                           "detectors": ", ".join(f"{k} {v}" for k, v in (rep or {}).get("flagged_by_detector", {}).items() if v) or "none",
                           "level": "" if not rep else "bad" if (rep.get("flagged_share") or 0) >= 0.25
                           else "warn" if (rep.get("flagged_share") or 0) >= 0.05 else ""})

    by_key = {(row["prompt_id"], row["drafter"]): row for row in rows}
    worst = [{"name": d["name"], "color": d["color"],
              "blocks": [block_cells(b) for b in select_blocks(rows, drafter=d["name"], worst=WORST_BLOCKS)]}
             for d in drafters]
    prompts = []
    for pid in prompt_ids:
        parts = []
        for d in drafters:
            row = by_key.get((pid, d["name"]))
            if row is None:
                continue
            blocks = walk_blocks(row)
            first_div = next((b.step for b in blocks if b.first_rejected is not None), None)
            shown = blocks[:PROMPT_BLOCKS]
            if first_div is not None and first_div >= PROMPT_BLOCKS:
                shown.append(blocks[first_div])
            parts.append({"name": d["name"], "color": d["color"], "steps": len(blocks),
                          "tau": per_prompt[d["name"]].get(pid), "first_divergence": first_div,
                          "blocks": [block_cells(b) for b in shown]})
        if parts:
            prompts.append({"id": pid, "anchor": anchor[pid], "set": prompt_set_of.get(pid, ""), "parts": parts})

    charts = {"tau": tau_chart(bars, groups, refs) if drafters else None,
              "slots": slot_chart(drafters) if drafters else None,
              "histogram": histogram_chart(drafters) if drafters else None,
              "prompts": prompt_chart(drafters, per_prompt) if any(per_prompt.values()) else None,
              "repetition": repetition_chart(drafters) if any(d.get("repetition") for d in drafters) else None}
    doctor = run.get("doctor")  # added by `dflash-eval doctor --out RUN_DIR`
    return {"doctor": doctor, "walk": walk_words(prov), "live": prov.get("mode") == "live", "legend": run_legend(run),
        "title": title or page_title(run, verdict), "verdict": verdict,
        "explanation": run.get("explanation") or [],  # `run --reference` (core/explanation.py)
        "provenance": _provenance(run), "warnings": prov.get("warnings") or [],
              "incomplete": run.get("incomplete"),
        "drafters": drafters, "summary": summary, "by_set": by_set, "paper": paper,
        "paper_source": references.published_tau_source() if paper else None,
        "charts": charts, "names": names, "prompt_rows": prompt_rows, "repetition": repetition,
        "worst": worst, "prompts": prompts, "sample_legend": _sample_legend(),
        "page_rows": PAGE_ROWS, "page_prompts": PAGE_PROMPTS, "worst_blocks": WORST_BLOCKS,
        "prompt_blocks": PROMPT_BLOCKS, "serving": serving_view(run),
        "serving_note": SPEEDUP_NOTE, "breakdown": breakdown_view(run),  # render/breakdown.py
        "trees": tree_view(run),  # --tree-budgets: render/tree.py
    }


def render_run_html(run: RunDocument, rows: list[SampleRow], *, title: str | None = None,
                    run_dir: str | None = None) -> str:
    """The whole report of a run (run.json as a dict, samples.jsonl rows) as one self-contained HTML page,
    opening with the verdict block (core/verdict.py; `run_dir` as the user names the folder, for its commands)."""
    if run.get("provenance", {}).get("estimate"):
        return render_estimate_html(run, title=title, run_dir=run_dir)
    return render_page("run.html.j2", **_run_context(run, rows, title, run_dir))


def _estimate_chart(drafters: list[dict]) -> str:
    """alpha_i and expected reach per slot, drafters overlaid (the estimate's per-slot view)."""
    with chart_style():
        fig, axes = new_figure(9.5, 3.3, ncols=2)
        for ax, key, title in ((axes[0], "alpha", "alpha_i = sum min(p, q) (teacher forced)"),
                               (axes[1], "expected_reach", "expected reach = E[prod alpha_j, j <= i]")):
            for d in drafters:
                values = d["metrics"][key]
                ax.plot(range(1, len(values) + 1), none_as_nan(values), "o-", color=d["color"], markersize=3,
                        label=chart_label(d["name"]))
            ax.set_xlabel("slot i")
            ax.set_ylim(0, 1)
            ax.set_title(title)
        chart_legend(axes[1], loc="upper right")
        return figure_to_svg(fig, "alpha")


def render_estimate_html(run: RunDocument, *, title: str | None = None, run_dir: str | None = None) -> str:
    """Temperature > 0, offline: the verdict block, then the estimate per drafter, labelled as one, with its
    definition."""
    from ..core.verdict import verdict_block
    from ..formats.references import published_comparison

    drafters = [{**d, "color": PALETTE[i % len(PALETTE)]} for i, d in enumerate(run["drafters"])]
    prov = run["provenance"]
    paper = published_comparison(prov, [(d.get("spec") or {}).get("block_size", 0) for d in drafters])
    verdict = verdict_block(run, run_dir, bands=published.bands_for(run))
    return render_page("estimate.html.j2", title=title or page_title(run, verdict) + " (estimate at temperature > 0)",
                       verdict=verdict, run=run, prov=prov,
                 drafters=drafters, provenance=_provenance(run), chart=_estimate_chart(drafters), paper=paper,
                 sampling=prov.get("sampling") or {}, warnings=prov.get("warnings") or [], legend=list(ESTIMATE_LEGEND))


def render_diff_html(result: dict) -> str:
    """`commands.diff.diff()`'s result as one self-contained HTML page: verdict, deltas, per slot, prompts."""
    if result.get("estimate"):
        from ..core.errors import InputError

        raise InputError(None, "diff --html-file does not draw a comparison of offline estimates yet; the terminal "
                               "and --json outputs show it")
    a, b = result["a"], result["b"]
    examples = {}
    for key in ("regressed", "improved"):
        examples[key] = []
        for example in result[key]:
            pair = None
            if example.get("blocks"):
                pair = pair_block(view_block(example["blocks"][0]), view_block(example["blocks"][1]))
            examples[key].append({**example, "pair": pair})
    slots = result["slots"]
    width = len(slots["reach"])
    slot_rows = [{"slot": i + 1, "reach": slots["reach"][i],
                  "conditional": slots["conditional"][i] if i < len(slots["conditional"]) else None,
                  "marginal": slots["marginal"][i] if slots.get("marginal") and i < len(slots["marginal"]) else None}
                 for i in range(width)]
    charts = {"delta": delta_chart(result), "slots": diff_slot_chart(slots),
              "histogram": diff_histogram_chart(result["histogram"], a["name"], b["name"])}
    macro = result["delta_tau_macro"]  # the colour follows compare.verdict's rule (interval and p < 0.05)
    significant = macro["p_value"] < 0.05
    verdict_class = ("better" if significant and macro["low"] > 0 else "worse" if significant and macro["high"] < 0
                     else "same")
    return render_page("diff.html.j2", title=f"dflash-eval diff: {a['label']} vs {b['label']}", r=result, a=a, b=b,
                 examples=examples, slot_rows=slot_rows, charts=charts, verdict_class=verdict_class,
                 sample_legend=_sample_legend(), draft_lengths=draft_length_diff_view(result),
                 trees=tree_diff_view(result))
