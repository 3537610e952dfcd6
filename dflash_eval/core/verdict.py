"""The verdict block every report opens with: what a user came to learn, before any table (issue 48).

One view of a run document, rendered alike by the terminal (render/terminal_verdict.py), `report --json`
and `--markdown` (commands/report.py, render/markdown.py) and report.html (templates/_verdict.html.j2):

- each drafter's tau macro with its interval;
- the paired delta of each drafter to the reference (`run --reference`; without one, to the first drafter),
  in `compare.verdict`'s words: better, worse or indistinguishable, with interval, p and prompts paired;
- the doctor's verdict and the share of the gap it closes, when there is one: the run's own explanation
  (core/explanation.py) or the `doctor` section `doctor --out RUN` added;
- beside each drafter that is a published pair with its target, the band of published tau per prompt set and
  where the run falls (`bands`: formats/published.py finds them, the caller passes them in);
- the numbers that should not be (core/implausible.py): a tau outside [1, B], every position exactly 0 or 1,
  a reach that rises with the slot, each with what it usually means;
- the drop to the serving target and its split (`--serving-target`: core/serving_split.py), when the run has one;
- the next commands, every drafter named as `RUN:NAME` the way `diff` reads it back (shell-quoted).

Pure: nothing is measured here that run.json does not hold, except the paired deltas (compare.py).
"""

from __future__ import annotations

import shlex
from typing import Any

from .compare import delta_tau_per_prompt, verdict


def _per_prompt(drafter: dict[str, Any]) -> dict[str, tuple[float, float]]:
    """prompt id -> (steps, committed): counted, or expected for an offline estimate (temperature > 0)."""
    counts = drafter.get("counts") or drafter.get("estimate") or {}
    return {pid: (s, c) for pid, (s, c) in (counts.get("per_prompt") or {}).items()}


PROGRAM = ("dflash-eval",)  # how the commands call the CLI; the terminal passes the way this shell reaches it


def command(*words: object, program: tuple[str, ...] = PROGRAM) -> str:
    """One shell line (`dflash-eval ...`), each word quoted as a shell needs it."""
    return shlex.join([*program, *map(str, words)])


def _explained(run: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """drafter name -> its explanation: the run's own (`run --reference`), else the doctor section's."""
    out = {e["drafter"]: {**e, "source": "run --reference"} for e in run.get("explanation") or []}
    doctor = run.get("doctor")
    if doctor and doctor.get("drafter") not in out:
        gap = doctor.get("gap") or {}
        gap_delta = gap.get("gap")
        behind = bool(gap_delta and gap_delta.get("low", 0) > 0 and gap_delta.get("p_value", 1) < 0.05)
        out[doctor["drafter"]] = {"drafter": doctor["drafter"], "reference": gap.get("reference"), "behind": behind,
                                  "verdict": doctor["verdict"], "finding": doctor.get("finding"), "gap": gap or None,
                                  "variants": doctor.get("variants") or [], "source": "doctor --out"}
    return out


def _closing(explanation: dict[str, Any]) -> dict[str, Any] | None:
    """The variant the gap paragraph names (explained_by), with its share and interval and flagged shares."""
    gap = explanation.get("gap") or {}
    name = gap.get("explained_by")
    row = next((r for r in gap.get("variants") or [] if r["variant"] == name), None)
    if row is None:
        return None
    flagged = {r["variant"]: r.get("flagged_share") for r in explanation.get("variants") or []}
    total = (gap.get("gap") or {}).get("total")
    return {"variant": name, "share": row["share"], "share_ci": row["share_ci"], "check": row.get("check"),
            "paired_prompts": gap.get("paired_prompts"), "prompts": total if total is not None else gap.get("paired_prompts"),
            "flagged_configured": flagged.get("as configured"), "flagged_variant": flagged.get(name)}


def verdict_block(run: dict[str, Any], run_dir: str | None = None,
                  program: tuple[str, ...] = PROGRAM, bands: dict[str, list[dict[str, Any]]] | None = None) -> dict[str, Any]:
    """The verdict view of `run` (module docstring); `run_dir`: the folder as the user names it (default: as the
    run was given its --out), `program`: the words that call dflash-eval (the next commands), `bands`: drafter
    name -> its published bands (formats/published.bands_for), shown beside its tau."""
    from .implausible import drafter_flags

    drafters = run.get("drafters") or []
    prov = run.get("provenance") or {}
    run_dir = run_dir or prov.get("out")
    reference = (prov.get("reference") or {}).get("name")
    names = [d["name"] for d in drafters]
    if reference not in names:
        reference = None
    base = reference or (names[0] if len(names) > 1 else None)
    by_name = {d["name"]: d for d in drafters}
    explained = _explained(run)
    served = {r["drafter"]: r["verdict"] for r in (run.get("serving_target") or {}).get("drafters") or []}
    rows = []
    for d in drafters:
        m = d.get("metrics") or {}
        row: dict[str, Any] = {"name": d["name"], "tau_macro": m.get("tau_macro"), "tau_macro_ci": m.get("tau_macro_ci"),
                               "estimate": bool(m.get("estimate")), "reference": d["name"] == reference,
                               "flagged_share": (d.get("repetition") or {}).get("flagged_share"),
                               "bands": list((bands or {}).get(d["name"]) or []), "flags": drafter_flags(d)}
        if base is not None and d["name"] != base:
            try:
                delta = delta_tau_per_prompt(_per_prompt(by_name[base]), _per_prompt(d), seed=0, common_only=True)
                row["delta"] = {**delta.to_dict(), "to": base}
                row["line"] = verdict(delta, base, d["name"])
            except ValueError as exc:  # no prompt with steps on both sides
                row["delta"], row["line"] = None, f"{d['name']} vs {base}: {exc}"
        if d["name"] in served:
            row["serving"] = served[d["name"]]
        if d["name"] in explained:
            e = explained[d["name"]]
            row["explanation"] = {"source": e["source"], "reference": e.get("reference"), "behind": e.get("behind"),
                                  "verdict": e["verdict"], "finding": e.get("finding"), "closing": _closing(e),
                                  "paragraph": (e.get("gap") or {}).get("paragraph")}
        rows.append(row)
    compared = [n for n in names if n != base]
    title = (f"{', '.join(compared)} vs {base}" if base is not None and compared else
             ", ".join(names) or "no drafters")
    from .tau_definitions import DEFINITIONS

    return {"title": title, "reference": reference, "compared_to": base, "prompts": (prov.get("prompts") or {}).get("count"),
            "tau_definition": DEFINITIONS["zlab"].to_dict(),  # every tau carries its definition
            "drafters": rows, "next": next_commands(run, run_dir, base, explained, program)}


def next_commands(run: dict[str, Any], run_dir: str | None, base: str | None,
                  explained: dict[str, dict[str, Any]], program: tuple[str, ...] = PROGRAM) -> list[dict[str, str]]:
    """What to run next, as (why, command) pairs; RUN:NAME as `diff` reads it."""
    if not run_dir:
        return []
    out = []
    drafters = run.get("drafters") or []
    prov = run.get("provenance") or {}
    for d in drafters:
        if d["name"] == base:
            continue
        e = explained.get(d["name"])
        if e and e.get("behind") and (d.get("repetition") or {}).get("flagged_blocks"):
            out.append({"why": f"the repetitive blocks of {d['name']}, worst first",
                        "command": command("show", run_dir, "--flagged", "--drafter-name", d["name"], program=program)})
        if base is not None:
            out.append({"why": f"{d['name']} against {base}, prompt by prompt and slot by slot",
                        "command": command("diff", f"{run_dir}:{base}", f"{run_dir}:{d['name']}", program=program)})
        reference = (prov.get("reference") or {}).get("given")
        if e and e.get("behind") and e["source"] == "run --reference" and reference:
            out.append({"why": "a deeper look (logit lens, context variants, the teacher's norm)",
                        "command": command("doctor", "--drafter", d["path"], "--reference", reference, "--out", run_dir,
                                               program=program)})
    if not out and drafters:
        out.append({"why": "the worst blocks along the walk", "command": command("show", run_dir, "--worst", 5, program=program)})
    return out
