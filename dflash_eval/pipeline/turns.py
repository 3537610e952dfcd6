"""Later turns of a multi-turn set (mt-bench): each follows the target's own greedy answer to the turn before,
filled in before anything else of a run, doctor or track reads the prompts.

Why: z-lab's benchmark (dflash/benchmark.py `_run_transformers`; the same loop at z-lab/dflash bb48ef9) sends
turn k of a conversation after the assistant message its own decoding produced for turn k - 1, decoded with
`skip_special_tokens=True`, and counts every turn as one request of the mean. At temperature 0 that decoding
commits the target's greedy continuation (primer section 5), so the answer here is the target's greedy
continuation of turn k - 1 under the run's settings (thinking flag, --max-new-tokens, dtype, device): the
very continuation the run then scores for turn k - 1. Until this runs, a later turn holds
`hf_prompts.ANSWER_PLACEHOLDER` (what `prompts show` prints).

How (`answer_earlier_turns`): the answers come from `continuations.continuations_for` over the whole set (not
only the prompts a --limit, --shard or resume asks for), turn by turn, so that every turn is generated in the
batches `continuations._whole_plan` plans for its turn (one plan per turn depth, over the whole set: the run
then finds the same continuations in the cache, whichever prompts it evaluates). The target is loaded for
this and released again; the command loads it as usual afterwards. Prompt lengths are checked again, and
--shard re-balanced, on the filled-in turns. Refused by name: --temperature > 0 (each sample would need its
own conversation) and --responses (the turns' answers would be someone else's; give the conversations as a
FILE.jsonl of messages instead).
"""

from __future__ import annotations

from dataclasses import replace

from ..core.errors import InputError
from .continuations import continuations_for, template_ids
from .prompts import Prompt, load_prompts, message_prompt, shard_prompts


def answer_earlier_turns(inputs, settings, reporter, target=None):
    """`inputs` with every later turn's conversation filled in (module docstring); unchanged without any. The
    whole set, answered, becomes the set generation plans over (`inputs.planned`)."""
    if not any(p.after for p in inputs.all_prompts or inputs.prompts):
        return inputs
    given = settings.inputs
    if settings.sampling.temperature > 0:
        raise InputError(given.prompts, "is multi-turn: each later turn follows the target's greedy answer; at "
                                        "--temperature > 0 every sample would need its own conversation (not supported)")
    if given.responses:
        raise InputError(given.responses, f"--prompts {given.prompts} is multi-turn: its later turns follow the "
                                          "target's own answers; give the conversations as --prompts FILE.jsonl "
                                          "of messages to evaluate other continuations")
    whole = load_prompts(given.prompts, prompt_field=given.prompt_field)
    loaded = target is None
    if loaded:
        from ..model.target import load_target

        reporter.note(f"{given.prompts}: loading the target to answer the earlier turns of its conversations")
        target = load_target(str(inputs.target_path), device=settings.placement.device, dtype=settings.placement.dtype,
                             allow_accelerated_on_cpu=settings.replay.kernels == "torch", **inputs.placed.load_keywords())
    try:
        answered = _fill_in(whole, target, settings, inputs.thinking, reporter)
    finally:
        if loaded:
            del target
            _release_memory()
    inputs.planned = [answered[p.id] for p in whole]
    inputs.all_prompts = [answered[p.id] for p in inputs.all_prompts] if inputs.all_prompts else None
    inputs.prompts = [answered[p.id] for p in inputs.prompts]
    inputs._ids = None
    from ..model.target import check_prompt_lengths

    check_prompt_lengths(inputs.target_path, {k: len(v) for k, v in inputs.prompt_ids().items()}, given.max_new_tokens)
    if inputs.placed is not None and inputs.placed.shard:
        every = inputs.all_prompts
        cost = {p.id: len(template_ids(inputs.tokenizer, p, inputs.thinking)) + given.max_new_tokens for p in every}
        inputs.prompts = shard_prompts(every, cost, *inputs.placed.shard)
        inputs._ids = None
    return inputs


def _fill_in(whole: list[Prompt], target, settings, thinking: bool, reporter) -> dict[str, Prompt]:
    """id -> prompt with its conversation filled in, every turn of `whole`, turn depth by turn depth."""
    answered = {p.id: p for p in whole if p.after is None}
    waiting = [p for p in whole if p.after is not None]
    while waiting:
        ready = [(p, p.after) for p in waiting if p.after is not None and p.after in answered]  # (turn, its earlier)
        if not ready:
            raise InputError(settings.inputs.prompts, f"turn {waiting[0].id!r} follows {waiting[0].after!r}, which is not in the set")
        earlier = list({after: answered[after] for _, after in ready}.values())
        reporter.note(f"{settings.inputs.prompts}: answering {len(earlier)} earlier turn(s) with the target's greedy "
                      "continuations (the whole set, cached), so that the next turns follow them")
        ids = {p.id: template_ids(target.tokenizer, p, thinking) for p in earlier}
        texts, _ = continuations_for(target, earlier, ids, settings, thinking, None, reporter,
                                     universe=list(answered.values()))
        for p, after in ready:
            answer = target.tokenizer.decode(texts[after], skip_special_tokens=True)
            conversation = [*answered[after].chat(), {"role": "assistant", "content": answer},
                            {"role": "user", "content": p.chat()[-1]["content"]}]
            answered[p.id] = replace(message_prompt(p.id, conversation, p.set), after=after)
        waiting = [p for p in waiting if p.id not in answered]
    return answered


def _release_memory() -> None:
    import gc

    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
