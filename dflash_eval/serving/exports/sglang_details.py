"""SGLang's detailed per-request speculative stats (sgl-project/sglang #34814, open): the ordered
`verify_lengths` and `accept_lengths` of a request, read beside its 0.5.23 counters.

#34814 adds `--speculative-decoding-stats {none,summary,detailed}`; the stats ride on the native `/generate`
response as `meta_info.speculative_decoding_stats` and on the OpenAI endpoints as
`sglext.speculative_decoding_stats`; `detailed` adds the ordered `verify_lengths` (the width each verify step
actually checked: the configured stride, or `cap_lens` under ragged verification) and `accept_lengths`,
recorded from the verifier before grammar or stop handling shortens the client's output. Only those two
arrays (the fields the PR names) are read: its summary counters' names are not settled while it is open.

Read as: step i accepted `accept_lengths[i]` drafts (bonus excluded, SGLang's `spec_num_correct_drafts` sums
them) and verified `verify_lengths[i]`. Where the response also carries 0.5.23's `spec_verify_ct` and
`spec_num_correct_drafts`, the arrays must agree with them (one entry per verify step, the accepted summing to
the correct drafts), else refused by name. Whether a width counts the drafts or the drafts plus the root token
is pinned by `spec_num_proposed_drafts` when the width is fixed (it is then verify_ct x drafts); under ragged
verification (widths that vary) `spec_num_proposed_drafts` and `spec_accept_rate` are SGLang's verify_ct x
configured width, not what was drafted: no drafted count and no acceptance rate is given, and that is said
(core/tau_definitions.not_convertible "sglang_ragged"). tau = 1 + accepted / steps needs neither.
"""

from __future__ import annotations

from typing import Any

from ...core.tau_definitions import not_convertible
from ..counters import checks

FIELD = "speculative_decoding_stats"


def stats_of(body: dict) -> tuple[dict | None, str]:
    """The request's #34814 stats and where they were found, or (None, "")."""
    for holder, where in ((body.get("meta_info"), "meta_info"), (body.get("sglext"), "sglext")):
        if isinstance(holder, dict) and holder.get(FIELD) is not None:
            stats = holder[FIELD]
            stats = stats[0] if isinstance(stats, list) and len(stats) == 1 else stats
            if not isinstance(stats, dict):
                raise ValueError(f"{where}.{FIELD} is not one object")
            return stats, f"{where}.{FIELD}"
    return None, ""


def detailed_fields(stats: dict, where: str, counters: dict[str, Any] | None) -> dict[str, Any]:
    """Our fields from the ordered lengths: steps, accepted, per_step_accepted, per_step_drafted (when the width's
    unit is pinned), draft_tokens (None under ragged verification) and notes. `counters`: the 0.5.23 fields read
    beside them (steps, accepted, draft_tokens), or None."""
    verify, accept = stats.get("verify_lengths"), stats.get("accept_lengths")
    if verify is None and accept is None:
        return {}
    if not isinstance(verify, list) or not isinstance(accept, list):
        raise ValueError(f"{where} has verify_lengths and accept_lengths as {type(verify).__name__} and "
                         f"{type(accept).__name__}: both ordered lists (sglang #34814 'detailed')")
    verify = [checks.count(v, f"{where}.verify_lengths[{i}]") for i, v in enumerate(verify)]
    accept = [checks.count(a, f"{where}.accept_lengths[{i}]") for i, a in enumerate(accept)]
    if len(verify) != len(accept):
        raise ValueError(f"{where}: {len(verify)} verify_lengths and {len(accept)} accept_lengths: one each per verify "
                         "step")
    for i, (v, a) in enumerate(zip(verify, accept)):
        if a > v:
            raise ValueError(f"{where}: step {i} accepted {a} drafts of a {v}-token verification")
    steps, accepted = len(verify), sum(accept)
    notes: list[str] = []
    if counters:
        if counters.get("steps") is not None and counters["steps"] != steps:
            raise ValueError(f"{where} has {steps} verify steps, spec_verify_ct says {counters['steps']}")
        if counters.get("accepted") is not None and counters["accepted"] != accepted:
            raise ValueError(f"{where}.accept_lengths sums to {accepted}, spec_num_correct_drafts says "
                             f"{counters['accepted']}")
    ragged = len(set(verify)) > 1
    drafted = None
    proposed = (counters or {}).get("draft_tokens")
    if ragged:
        notes.append(f"ragged verification (verify widths {min(verify)}..{max(verify)}): no drafted count and no "
                     f"acceptance rate: {not_convertible('sglang_ragged')}")
    elif proposed is not None and proposed == sum(verify):
        drafted = list(verify)
    elif proposed is not None and proposed == sum(verify) - steps:
        drafted = [v - 1 for v in verify]
    elif proposed is not None:
        raise ValueError(f"{where}: spec_num_proposed_drafts is {proposed}, neither the {sum(verify)} tokens the "
                         f"verify_lengths sum to nor those less one root token per step ({sum(verify) - steps})")
    else:
        notes.append("verify_lengths read without spec_num_proposed_drafts: whether a width counts the root token is "
                     "not pinned, so no drafted count")
    if drafted is not None:
        for i, (d, a) in enumerate(zip(drafted, accept)):
            if a > d:
                raise ValueError(f"{where}: step {i} accepted {a} of {d} drafted tokens")
    return {"steps": steps, "accepted": accepted, "per_step_accepted": tuple(accept),
            "per_step_drafted": None if drafted is None else tuple(drafted),
            "draft_tokens": None if drafted is None else sum(drafted), "ragged": ragged, "notes": tuple(notes)}
