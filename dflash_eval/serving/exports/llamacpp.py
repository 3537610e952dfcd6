"""llama.cpp's `/metrics` scrape, read into counts: speculative decoding as llama-server counts it.

Read from llama.cpp's code (ggml-org/llama.cpp #26389, `tools/server/server-task.cpp`
`server_task_result_metrics::to_metrics()`): for each counter a `# HELP llamacpp:NAME ...` and `# TYPE
llamacpp:NAME counter` line, then `llamacpp:NAME VALUE` with no labels, where VALUE is a `double` written by a
`std::stringstream` at its default precision: 6 significant digits, so a counter above 999,999 is printed
rounded (`1.23457e+06`). The speculative counters (`server_metrics` in `server-common.h`, summed from each
slot's stats when its request finishes, `server-context.cpp`):
- `llamacpp:spec_decode_num_drafts_total` (`n_draft_verif_steps`: verification steps),
- `llamacpp:spec_decode_num_draft_tokens_total` (`n_draft_tokens`: drafted tokens, a draft may stop short of
  n_max under `--spec-draft-p-min`),
- `llamacpp:spec_decode_num_accepted_tokens_total` (`n_draft_accepted`),
- `llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="i"}` (`n_accepted_per_pos[i]`, a uint64
  written exactly; position i counted when a step accepted more than i drafts, as vLLM counts it; the vector
  is sized n_max and the series exist only once a speculative request has finished).

tau (llama.cpp's own `mean acceptance length`, print_timings) = 1 + accepted / drafts: our tau micro. Two
scrapes of one server lifetime are subtracted like vLLM's; llama.cpp writes no `_created` time, so a restart
shows only as a counter that fell, refused by name. The invariants are counters/checks.py's; a count printed
rounded is said with the interval it allows on tau, never used as exact in silence.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ..counters import checks
from ..counters.counts import Sample, Served, varied_length_notes

PREFIX = "llamacpp:spec_decode"
COUNTERS = {"drafts": "llamacpp:spec_decode_num_drafts_total",
            "draft_tokens": "llamacpp:spec_decode_num_draft_tokens_total",
            "accepted": "llamacpp:spec_decode_num_accepted_tokens_total"}
PER_POS = "llamacpp:spec_decode_num_accepted_tokens_per_pos_total"
EXACT_BELOW = 1_000_000  # std::ostream's default precision (6 significant digits) prints smaller counts exactly


def has_counters(samples: Sequence[Sample]) -> bool:
    return any(s.name.startswith(PREFIX) for s in samples)


def _uncertainty(value: float) -> float:
    """Half a unit of the 6th significant digit of a counter printed at or above EXACT_BELOW; 0 below."""
    if value < EXACT_BELOW:
        return 0.0
    return 0.5 * 10 ** (math.floor(math.log10(value)) - 5)


def llamacpp_counts(samples: Sequence[Sample]) -> dict:
    """{"drafts", "draft_tokens", "accepted": int, "per_pos": {i: int}, "error": {counter: half-unit}} of one
    scrape; a missing counter, a labelled one, a non-count or a series given twice refused by name."""
    checks.unique_series(samples, PREFIX)
    out: dict = {"per_pos": {}, "error": {}}
    for s in samples:
        if s.name == PER_POS:
            position = s.label("position")
            if position is None or not position.isdigit() or len(s.labels) != 1:
                raise ValueError(f"{s.name} must carry exactly one numeric position label (llama.cpp's to_metrics), "
                                 f"not {dict(s.labels)}")
            out["per_pos"][int(position)] = checks.count(s.value, f'{PER_POS}{{position="{position}"}}')
            continue
        for key, name in COUNTERS.items():
            if s.name == name:
                if s.labels:
                    raise ValueError(f"{name} carries labels {dict(s.labels)}: llama.cpp writes its counters without "
                                     "any (a scrape relabelled by Prometheus? give the server's own /metrics text)")
                out[key] = checks.count(s.value, name)
                out["error"][key] = _uncertainty(s.value)
    missing = [name for key, name in COUNTERS.items() if key not in out]
    if missing:
        raise ValueError(f"has no {', '.join(missing)} (llama-server without a draft model, or an older build "
                         "without ggml-org/llama.cpp #26389)")
    positions = sorted(out["per_pos"])
    if positions and positions != list(range(len(positions))):
        raise ValueError(f"{PER_POS} has positions {positions}, not 0..n_max-1")
    return out


def _served(counts: dict, source: str, notes: list[str]) -> Served:
    per = counts["per_pos"]
    positions = tuple(per[i] for i in range(len(per))) if per else None
    checks.check_counts("llamacpp:spec_decode_* counters", counts["drafts"], counts["draft_tokens"], counts["accepted"],
                        positions)
    notes = list(notes)
    if positions is None:
        notes.append(f"no {PER_POS} series (written only once a speculative request has finished): per-position "
                     "acceptance unknown")
    else:
        if sum(positions) != counts["accepted"] and not counts["error"].get("accepted"):
            notes.append(f"per-position counts sum to {sum(positions)}, not to the {counts['accepted']} accepted "
                         "tokens (a scrape taken between a slot's two updates?)")
        notes.extend(varied_length_notes(counts["drafts"], counts["draft_tokens"], len(positions)))
    rounded = {k: e for k, e in counts["error"].items() if e}
    if rounded and counts["drafts"]:
        d, a = counts["drafts"], counts["accepted"]
        ed, ea = rounded.get("drafts", 0.0), rounded.get("accepted", 0.0)
        low, high = 1 + max(a - ea, 0) / (d + ed), 1 + (a + ea) / max(d - ed, 1)
        notes.append("llama.cpp prints its counters with 6 significant digits (a double through std::ostream): "
                     + ", ".join(f"{COUNTERS[k]} to +/-{e:g}" for k, e in sorted(rounded.items()))
                     + f"; tau lies in [{low:.5f}, {high:.5f}]")
    notes.append("llama.cpp adds a request's counts when it finishes: requests still running at the (second) scrape "
                 "are not in these figures")
    return Served("llamacpp", source, None, ("llama-server (one process)",), counts["drafts"], counts["draft_tokens"],
                  counts["accepted"], positions, None, tuple(notes))


def served_from_scrape(samples: Sequence[Sample], source: str) -> Served:
    """One scrape: the counts since the server started."""
    return _served(llamacpp_counts(samples), source, ["one scrape: the counts since the server started"])


def served_between_scrapes(before: Sequence[Sample], after: Sequence[Sample], source: str) -> Served:
    """AFTER - BEFORE; a counter that fell was reset (the server restarted) and is refused by name; a
    per-position series in one scrape only is refused unless BEFORE had no finished speculative request."""
    old, new = llamacpp_counts(before), llamacpp_counts(after)
    delta: dict = {"per_pos": {}, "error": {}}
    for key, name in COUNTERS.items():
        if new[key] < old[key]:
            raise ValueError(f"counter reset between the scrapes: {name} fell from {old[key]} to {new[key]} (the "
                             "server restarted): take both scrapes from one server lifetime")
        delta[key] = new[key] - old[key]
        delta["error"][key] = old["error"][key] + new["error"][key]
    if old["per_pos"] and not new["per_pos"]:
        raise ValueError(f"the BEFORE scrape has {PER_POS} series and the AFTER one none: not the same server")
    if new["per_pos"] and not old["per_pos"] and old["drafts"]:
        raise ValueError(f"the BEFORE scrape counts {old['drafts']} drafts but has no {PER_POS} series (llama.cpp "
                         "writes them once a speculative request has finished): not the same server")
    if old["per_pos"] and len(old["per_pos"]) != len(new["per_pos"]):
        raise ValueError(f"{PER_POS} has {len(old['per_pos'])} positions before and {len(new['per_pos'])} after: "
                         "another n_max, not the same server")
    for i, n in new["per_pos"].items():
        before_n = old["per_pos"].get(i, 0)
        if n < before_n:
            raise ValueError(f'counter reset between the scrapes: {PER_POS}{{position="{i}"}} fell from {before_n} to '
                             f"{n} (the server restarted): take both scrapes from one server lifetime")
        delta["per_pos"][i] = n - before_n
    return _served(delta, source, ["two scrapes: the window between them"])
