"""`served --per-request FILE --run RUN`: each served request beside the offline run of its prompt.

Acceptance that changes with the batch (llama.cpp #27117) and DFlash2 that is not lossless under greedy
(vLLM #54928) need a single-stream, exact reference to hold a server against; the offline run is that
reference. Each request (serving/exports/responses.py) is paired with its prompt in the run: by the client's
id when it is a prompt id of the run, else by the exact prompt (the chat messages, the user message or the
prompt token ids through the target's chat template); unmatched requests are counted and named, and two
requests for one prompt are refused (never one picked). Per prompt, on the numbers serving/counters/requests.py
defines:

1. the served text against the offline greedy continuation, first: a text that differs is named with the
   first token where it does. That alone does not judge losslessness: a server's kernels (fused attention,
   its GEMM shapes, bf16) can leave HF's eager greedy text without any speculation. What judges it is the
   same server's greedy text with speculative decoding off (`--non-speculative FILE`): a speculative text
   that leaves it is named as changed by speculation;
2. served tau against offline tau, and over prompts the paired delta with its interval and p;
3. with per-step arrays (`detailed`) and greedy serving, the served walk against the offline walk step by
   step, and the first step where they part (up to the first differing token; the last step may count
   drafts accepted past max_tokens, which vLLM does and no offline text can: named, not counted a parting);
4. prompts where the server accepts less than offline beyond noise, with their offline blocks.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ...core import compare as C
from ...core.errors import InputError
from ...core.implausible import MEANINGS, flag
from ...core.samples import walk_blocks
from ..counters import requests as R
from ..exports.responses import read_plain_outputs, read_requests_noted
from .divergence import divergence_fields, logit_gaps

BLOCKS_SHOWN = 3  # offline blocks listed per prompt that falls short


class _Prompts:
    """The run's prompts by exact text, messages and templated ids, loaded only when an id does not match."""

    def __init__(self, side):
        self.side, self._index, self._tokenizer, self._prompts = side, None, None, None

    def prompts(self) -> list:
        """The run's prompts (its own source, reloaded), those the run holds rows for."""
        if self._prompts is None:
            from ...pipeline.prompts import load_prompts

            try:
                self._prompts = [p for p in load_prompts(self.side.run["provenance"]["prompts"]["source"])
                                 if p.id in self.side.rows]
            except InputError as exc:
                raise InputError(self.side.run_dir, f"cannot reload the run's prompts ({exc.one_line()}): give each "
                                                    "request the prompt's id") from None
        return self._prompts

    def tokenizer(self):
        if self._tokenizer is None:
            from ...model.target import load_tokenizer

            self._tokenizer = load_tokenizer(Path(self.side.run["provenance"]["target"]["path"]))
        return self._tokenizer

    def index(self) -> dict:
        if self._index is None:
            from ...pipeline.prompts import chat_text, prompt_ids

            prov = self.side.run["provenance"]
            prompts = self.prompts()
            texts, chats, ids = {}, {}, {}
            thinking = bool(prov["enable_thinking"])
            for p in prompts:
                texts[p.text] = p.id
                texts[chat_text(self.tokenizer(), p, thinking)] = p.id  # a completions request sends the templated text
                chats[tuple(tuple(sorted(m.items())) for m in p.chat())] = p.id
                ids[tuple(prompt_ids(self.tokenizer(), p, thinking))] = p.id
            self._index = {"text": texts, "chat": chats, "ids": ids}
        return self._index

    def match(self, r: R.ServedRequest) -> tuple[str | None, str]:
        if r.key is not None and r.key in self.side.rows:
            return r.key, "id"
        if r.messages is None and r.prompt_text is None and r.prompt_ids is None:
            return None, "nothing to match by (no id of the run, no prompt)"
        index = self.index()
        if r.messages is not None:
            found = index["chat"].get(tuple(tuple(sorted(m.items())) for m in r.messages))
            if found:
                return found, "chat messages"
        if r.prompt_text is not None and r.prompt_text in index["text"]:
            return index["text"][r.prompt_text], "prompt text"
        if r.prompt_ids is not None and r.prompt_ids in index["ids"]:
            return index["ids"][r.prompt_ids], "prompt token ids"
        return None, "no prompt of the run has this id, text or token ids"


def _text_check(r: R.ServedRequest, row: dict, prompts: _Prompts) -> dict[str, Any]:
    """The served text against the offline greedy continuation."""
    if r.temperature:
        return {"status": "sampled", "detail": f"temperature {r.temperature}: not compared with the greedy text"}
    out = _text_against(r, row, prompts)
    if out["status"] == "differs" and r.temperature is None:
        out["detail"] += " (the file holds no request temperature: taken as 0)"
    return out


def _text_against(r: R.ServedRequest, row: dict, prompts: _Prompts) -> dict[str, Any]:
    """Token ids when the response holds them (the first differing token), else the text against the decoded
    continuation (the first differing character)."""
    offline = row["continuation_ids"]
    if r.output_ids is not None:
        served = list(r.output_ids)
    elif r.output_text is not None:
        tokenizer = prompts.tokenizer()
        served_text, offline_text = r.output_text, tokenizer.decode(offline, skip_special_tokens=True)
        common = min(len(served_text), len(offline_text))
        at = next((i for i in range(common) if served_text[i] != offline_text[i]), None)
        if at is None:
            return {"status": "greedy", "detail": "the served text is the offline greedy text (compared as text)",
                    "compared": common}
        return {"status": "differs", "detail": f"the served text differs from the offline greedy text at character "
                                               f"{at}", "character": at, "means": MEANINGS["text_not_greedy"],
                "rest_on_different_text": True}
    else:
        return {"status": "unknown", "detail": "the response holds no output text or token ids"}
    at = R.first_token_difference(served, offline)
    if at is None:
        return {"status": "greedy", "detail": "the served tokens are the offline greedy continuation"
                + ("" if len(served) == len(offline) else f" ({len(served)} served, {len(offline)} offline tokens)"),
                "compared": min(len(served), len(offline))}
    return {"status": "differs", "token": at, "served_token": served[at], "offline_token": offline[at],
            "detail": f"the served text differs from the offline greedy text at token {at} (served id {served[at]}, "
                      f"offline id {offline[at]})", "means": MEANINGS["text_not_greedy"],
            **divergence_fields(served, offline, at)}


def _against_plain(r: R.ServedRequest, plain: R.ServedOutput | None, prompts: _Prompts) -> dict[str, Any] | None:
    """The speculative text against the same server's non-speculative greedy text of the prompt: what judges
    losslessness (both through the server's kernels, so kernel numerics alone cannot part them, except
    where a verify step's shapes move a near-tie: named by the first token where they part)."""
    if plain is None:
        return None
    if r.temperature:
        return {"status": "sampled", "detail": f"temperature {r.temperature}: not compared with the greedy text"}
    if r.output_ids is not None and plain.output_ids is not None:
        served, reference = list(r.output_ids), list(plain.output_ids)
        at = R.first_token_difference(served, reference)
        if at is None:
            return {"status": "lossless", "compared": min(len(served), len(reference)),
                    "detail": "the speculative tokens are the same server's non-speculative greedy tokens"
                    + ("" if len(served) == len(reference) else f" ({len(served)} and {len(reference)} tokens)")}
        return {"status": "changed", "token": at, "served_token": served[at], "plain_token": reference[at],
                "detail": f"the speculative text leaves the same server's non-speculative greedy text at token {at} "
                          f"(speculative id {served[at]}, non-speculative id {reference[at]})"}
    a = r.output_text if r.output_text is not None else (
        prompts.tokenizer().decode(list(r.output_ids), skip_special_tokens=True) if r.output_ids is not None else None)
    b = plain.output_text if plain.output_text is not None else prompts.tokenizer().decode(
        list(plain.output_ids), skip_special_tokens=True)
    if a is None:
        return {"status": "unknown", "detail": "the response holds no output text or token ids"}
    at = next((i for i in range(min(len(a), len(b))) if a[i] != b[i]), None)
    if at is None:
        return {"status": "lossless", "compared": min(len(a), len(b)),
                "detail": "the speculative text is the same server's non-speculative greedy text (compared as text)"}
    return {"status": "changed", "character": at,
            "detail": f"the speculative text leaves the same server's non-speculative greedy text at character {at}"}


def _walk_check(r: R.ServedRequest, walk: list[int], text: dict[str, Any], k_offline: int) -> dict[str, Any] | None:
    """Step by step (detailed arrays, greedy serving): the first step where the walks part."""
    if r.per_step_accepted is None or text["status"] not in ("greedy", "differs"):
        return None
    served = list(r.per_step_accepted)
    if r.num_spec_tokens is not None and r.num_spec_tokens != k_offline:
        return {"compared": 0, "parted_at": None, "detail": f"the server drafts {r.num_spec_tokens} tokens per step, "
                                                            f"the offline run {k_offline}: walks not comparable"}
    limit = len(walk)
    if text["status"] == "differs" and "token" in text:  # steps wholly inside the common text
        done, limit = 1, 0
        for n in walk:
            if done + n + 1 > text["token"]:
                break
            done, limit = done + n + 1, limit + 1
    part = R.first_parting(served[:limit], walk[:limit]) if limit else None
    out = {"compared": min(limit, len(served)), "parted_at": part, "served_steps": len(served), "offline_steps": len(walk)}
    if part is None:
        out["detail"] = "the served walk is the offline walk, step for step"
        if len(served) != len(walk) and text["status"] == "greedy":
            out["detail"] += f" over {min(len(served), len(walk))} steps ({len(served)} served, {len(walk)} offline)"
        return out
    last = part == len(walk) - 1 == len(served) - 1
    if last and served[part] > walk[part]:
        out.update(parted_at=None, last_step=True,
                   detail=f"equal up to the last step, where the server counts {served[part]} accepted drafts and the "
                          f"offline walk {walk[part]}: vLLM counts drafts accepted past max_tokens or the stop token "
                          "(scheduler update_from_output, before check_stop); no target token exists there offline")
        return out
    out["served"], out["offline"] = served[part] if part < len(served) else None, walk[part] if part < len(walk) else None
    out["detail"] = (f"the walks part at step {part}: the server accepted {out['served']} drafts, the offline walk "
                     f"{out['offline']}")
    return out


def _pair_plain(plain_path: Path | None, prompts: _Prompts) -> tuple[dict[str, R.ServedOutput], list[dict]]:
    """The non-speculative responses by the run's prompt (matched as the requests are), and the unmatched."""
    if plain_path is None:
        return {}, []
    by_prompt: dict[str, R.ServedOutput] = {}
    unmatched = []
    for output in read_plain_outputs(plain_path):
        pid, why = prompts.match(output)
        if pid is None:
            unmatched.append({"request": output.label(), "why": why})
        elif pid in by_prompt:
            raise InputError(plain_path, f"{by_prompt[pid].label()} and {output.label()} both match prompt {pid!r}: "
                                         "keep one response per prompt")
        else:
            by_prompt[pid] = output
    return by_prompt, unmatched


def reconcile(path: Path, run: str, non_speculative: Path | None = None, logit_gap: bool = False) -> dict[str, Any]:  # noqa: C901 (past the ceiling before it was set; split by idea when next touched)
    """The one document `served --per-request` prints (`--json`) and renders. `non_speculative`: the same
    server's responses to the same prompts with speculative decoding off, the reference that judges
    losslessness (the offline text differs from any server's for kernel reasons alone). `logit_gap`: load the
    run's target and give its logit gap at each first differing token (serving/commands/divergence.py)."""
    from ...commands.diff import load_side

    requests, read_notes = read_requests_noted(path)  # a file of responses, or AIPerf's records
    side = load_side(run)
    if side.drafter.get("counts") is None:
        raise InputError(side.run_dir, f"drafter {side.name!r} holds sampled estimates, not walks: reconcile against a "
                                       "greedy run (temperature 0)")
    prompts = _Prompts(side)
    k_offline = side.drafter["spec"]["block_size"] - 1
    matched: dict[str, R.ServedRequest] = {}
    how: dict[str, str] = {}
    unmatched = []
    for r in requests:
        pid, why = prompts.match(r)
        if pid is None:
            unmatched.append({"request": r.label(), "why": why})
            continue
        if pid in matched:
            raise InputError(path, f"{matched[pid].label()} and {r.label()} both match prompt {pid!r}: keep one "
                                   "request per prompt")
        matched[pid], how[pid] = r, why
    plain, plain_unmatched = _pair_plain(non_speculative, prompts)
    rows, served_pp, offline_pp = [], {}, {}
    pooled_served: dict[int, int] = {}
    pooled_offline = [0] * (k_offline + 1)
    cut, excluded, unknown_length = [], [], 0
    for pid in [p for p in side.rows if p in matched]:  # the run's prompt order
        r, row = matched[pid], side.rows[pid]
        walk = [n - 1 for n in row["walk_accept_lengths"]]
        # one population per table: the served and the offline walk over the same span of output tokens
        served_len, offline_len = R.output_length(r), row["continuation_len"]
        if served_len is None:
            unknown_length += 1
        elif served_len != offline_len:
            common = min(served_len, offline_len)
            if served_len > common and r.per_step_accepted is None:
                excluded.append(f"{pid} ({served_len} served tokens, {offline_len} offline)")
                continue  # a served walk without per-step arrays cannot be cut to the offline span
            walk = R.walk_within(walk, common)
            if served_len > common:
                r = R.within_tokens(r, common)
            cut.append((pid, served_len, offline_len, common))
        offline_hist = R.histogram_of(walk, k_offline + 1)
        pooled_offline = [a + b for a, b in zip(pooled_offline, offline_hist)]
        size = max(k_offline, r.num_spec_tokens or 0) + 1
        served_hist = R.served_histogram(r, size)
        for n, c in enumerate(served_hist or []):
            pooled_served[n] = pooled_served.get(n, 0) + c
        text = _text_check(r, row, prompts)
        entry = {"prompt": pid, "request": r.label(), "matched_by": how[pid], "engine": r.engine,
                 "served": {"steps": r.steps, "accepted": r.accepted, "tau": r.tau, "histogram": served_hist,
                            "reported_length": r.reported_length, "num_spec_tokens": r.num_spec_tokens},
                 "offline": {"steps": len(walk), "accepted": sum(walk), "tau": R.tau(len(walk), sum(walk)),
                             "histogram": offline_hist},
                 "text": text, "walk": _walk_check(r, walk, text, k_offline), "notes": list(r.notes)}
        if non_speculative is not None:
            entry["plain"] = _against_plain(r, plain.get(pid), prompts)
        if r.num_spec_tokens and r.draft_tokens is not None and r.draft_tokens != r.steps * r.num_spec_tokens:
            entry["notes"].append(f"{r.draft_tokens} drafted tokens in {r.steps} steps of k = {r.num_spec_tokens}: the "
                                  "draft length varied (dynamic speculation) or grammar invalidated drafts")
        entry["delta"] = None if r.tau is None or entry["offline"]["tau"] is None else r.tau - entry["offline"]["tau"]
        if text["status"] == "differs" and "token" in text and r.per_step_accepted is not None:
            # the steps wholly before the first differing token: both sides on the same text
            mine, theirs = R.within_tokens(r, text["token"]), R.walk_within(walk, text["token"])
            text["before_divergence"] = {"served_tau": mine.tau, "offline_tau": R.tau(len(theirs), sum(theirs)),
                                         "steps": [mine.steps, len(theirs)]}
        gap = R.below_offline(served_hist, offline_hist) if served_hist is not None else None
        entry["gap"] = gap
        if gap is not None and gap["below"]:
            entry["blocks"] = _short_blocks(row, r, walk)
        if r.steps:
            served_pp[pid] = (r.steps, r.steps + r.accepted)
        if walk:
            offline_pp[pid] = (len(walk), len(walk) + sum(walk))
        rows.append(entry)
    differing = {e["prompt"]: e["text"]["token"] for e in rows if e["text"]["status"] == "differs" and "token" in e["text"]}
    if logit_gap:
        gaps = logit_gaps(side, prompts, differing, {e["prompt"]: e["text"]["served_token"] for e in rows
                                                     if e["prompt"] in differing})
        for e in rows:
            if e["prompt"] in gaps:
                e["text"]["logit_gap"] = gaps[e["prompt"]]
    both = sorted(served_pp.keys() & offline_pp.keys())
    paired = None
    if both:
        paired = C.delta_tau_per_prompt({p: offline_pp[p] for p in both}, {p: served_pp[p] for p in both},
                                        seed=0).to_dict()
    engines = sorted({r.engine for r in matched.values()})
    drafted = sorted({r.num_spec_tokens for r in matched.values() if r.num_spec_tokens is not None} - {k_offline})
    notes = [f"the server drafts {', '.join(map(str, drafted))} tokens per step, the offline run {k_offline}: a DFlash "
             "block of another length is not a prefix of this one, so tau and the walks are not comparable"] if drafted else []
    notes.extend(_span_notes(cut, excluded, unknown_length, len(matched)))
    notes.extend(read_notes)
    return {"kind": "dflash-eval served --per-request", "file": str(path), "run": str(side.run_dir),
            "drafter": side.name, "block_size": k_offline + 1, "engines": engines, "requests": len(requests),
            "matched": len(matched), "unmatched": unmatched,
            "offline_prompts_without_request": sorted(set(side.rows) - set(matched)),
            "prompts": rows, "paired_delta": paired, "notes": notes,
            "histogram_shift": R.histogram_shift([pooled_served.get(n, 0) for n in range(max(pooled_served) + 1)],
                                                 pooled_offline) if pooled_served else None,
            "differs_from_offline": [e["prompt"] for e in rows if e["text"]["status"] == "differs"],
            "flags": [flag("text_not_greedy", f"prompt {e['prompt']}", e["text"]["detail"]) for e in rows
                      if e["text"]["status"] == "differs"],
            "non_speculative": None if non_speculative is None else {
                "file": str(non_speculative), "matched": len(plain), "unmatched": plain_unmatched,
                "requests_without_reference": [e["prompt"] for e in rows if e.get("plain") is None],
                "lossless": [e["prompt"] for e in rows if (e.get("plain") or {}).get("status") == "lossless"],
                "changed": [e["prompt"] for e in rows if (e.get("plain") or {}).get("status") == "changed"]},
            "parted": [e["prompt"] for e in rows if e["walk"] and e["walk"].get("parted_at") is not None],
            "below_offline": [e["prompt"] for e in rows if e["gap"] and e["gap"]["below"]],
            "definitions": {e: R.DEFINITIONS[e] for e in engines}}


def _span_notes(cut: list[tuple[str, int, int, int]], excluded: list[str], unknown: int, matched: int) -> list[str]:
    """What the table pairs, said when served and offline lengths differ (a 64-token request beside a
    16-token offline run covers text the offline walk never reached): the cut to the common span, the prompts
    left out because their served walk could not be cut, and requests whose length the file does not give."""
    notes = []
    if cut:
        longest = max(served for _, served, _, _ in cut)
        notes.append(f"{len(cut)} of {matched} prompts generated another number of tokens served than offline (served up "
                     f"to {longest}, offline up to {max(offline for _, _, offline, _ in cut)}): each is cut to the "
                     "tokens both sides generated (the steps wholly inside them), so every row pairs one span; "
                     "rerun offline with a matching --max-new-tokens to compare whole outputs")
    if excluded:
        notes.append(f"left out of every table: {len(excluded)} prompts whose served output is longer than the offline "
                     "run's and has no per-step arrays to cut it (" + ", ".join(excluded[:3])
                     + (", ..." if len(excluded) > 3 else "") + "): rerun offline with a matching --max-new-tokens, "
                     "or serve with --per-request-spec-decode-metrics detailed")
    if unknown:
        notes.append(f"{unknown} of {matched} responses give no output token count: that served and offline cover "
                     "the same span is not checked for them")
    return notes


def _short_blocks(row: dict, r: R.ServedRequest, walk: list[int]) -> list[dict[str, Any]]:
    """The offline blocks to read for a prompt the server falls short on: the steps where the served walk
    accepted fewer (per-step arrays), else the offline walk's first blocks."""
    blocks = walk_blocks(row)
    if r.per_step_accepted is not None:
        steps = [i for i, (a, b) in enumerate(zip(r.per_step_accepted, walk)) if a < b][:BLOCKS_SHOWN]
    else:
        steps = list(range(min(BLOCKS_SHOWN, len(blocks))))
    out = []
    for i in steps:
        b = blocks[i]
        out.append({"step": i, "anchor_pos": b.anchor_pos, "anchor": b.anchor, "draft": list(b.draft),
                    "target": list(b.target), "offline_accepted": b.accepted,
                    "served_accepted": r.per_step_accepted[i] if r.per_step_accepted is not None else None})
    return out
