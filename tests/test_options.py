"""Settings as sections (core/sections.py, core/options_work.py): every command that takes a section's flag
takes it as the section declares it (same name, default, help, panel), a refused value names its flag, and
what a section records reads back as the same section."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import typer

from dflash_eval.cli import app
from dflash_eval.core.errors import InputError
from dflash_eval.core.options import RunOptions
from dflash_eval.core.options_inputs import INPUT_SECTIONS, InputSettings, ServingTarget
from dflash_eval.core.options_output import OUTPUT_SECTIONS, Output
from dflash_eval.core.options_run import RUN_SECTIONS, Numerics, Placement, Replay
from dflash_eval.core.options_work import TAP_CHUNK, WORK_SECTIONS, Batching, Breakdown, LongContext, Sampling, Serving

COMMANDS = typer.main.get_command(app).commands
# the help a command may give a section's flag instead of the section's own: the same meaning, said for what
# that command does with it (track and doctor evaluate offline; doctor's window is a variant, not the run)
VARIANT_HELP = {("track", "temperature"): Sampling.OFFLINE_HELP["temperature"],
                ("track", "draft_policy"): Sampling.OFFLINE_HELP["draft_policy"],
                ("doctor", "temperature"): Sampling.OFFLINE_HELP["temperature"],
                ("doctor", "draft_policy"): Sampling.OFFLINE_HELP["draft_policy"],
                ("doctor", "draft_window"): Breakdown.DOCTOR_HELP["draft_window"],
                ("track", "out"): Output.TRACK_HELP["out"], ("track", "overwrite"): Output.TRACK_HELP["overwrite"]}
# a command's own flag of the same name: plan plans on a named accelerator (h200 by default) and refuses a
# negative temperature at parse; trained-taps computes its reference taps in float32 by default; plan needs a
# target, counts the demo prompts and 256 tokens by default (no run folder to take them from) and says so;
# trained-taps needs the target the data came from and reads its first 64 samples; demo generates 64 tokens;
# diff's and show's --seed seed their own statistics and choice; inspect's target and rules are a view;
# doctor, trained-taps, demo, merge and the exports write their own documents (--out optional or a file)
OWN = {("doctor", "out"), ("trained-taps", "out"), ("trained-taps", "overwrite"), ("demo", "out"), ("merge", "out"),
       ("merge", "overwrite"), ("export", "out"), ("export-serving", "out"),
       ("demo", "max_new_tokens"), ("diff", "seed"), ("show", "seed"), ("inspect", "target"), ("inspect", "semantics"),
       ("plan", "accelerator"), ("plan", "temperature"), ("plan", "samples"), ("trained-taps", "dtype"),
       ("plan", "target"), ("plan", "prompts"), ("plan", "limit"), ("plan", "max_new_tokens"), ("plan", "thinking"),
       ("trained-taps", "target"), ("trained-taps", "limit")}
SECTIONS = WORK_SECTIONS + RUN_SECTIONS + INPUT_SECTIONS + OUTPUT_SECTIONS
FLAGS = {flag.field: flag for section in SECTIONS for flag in section.FLAGS}


def section_params():
    for name, command in sorted(COMMANDS.items()):
        for param in command.params:
            if param.name in FLAGS and (name, param.name) not in OWN:
                yield name, param


def test_every_command_takes_a_section_flag_as_the_section_declares_it():
    seen = 0
    for name, param in section_params():
        flag = FLAGS[param.name]
        where = f"{name} {flag.flag}"
        assert tuple(param.opts) + tuple(param.secondary_opts) == tuple(
            n for names in flag.names for n in names.split("/")), where
        if flag.default is ...:
            assert param.required, where
        else:
            assert param.default == flag.default, where
        assert param.help == VARIANT_HELP.get((name, param.name), flag.help), where
        assert getattr(param, "rich_help_panel", None) == flag.panel, where
        if flag.minimum is not None:
            assert param.min == flag.minimum, where
        seen += 1
    assert seen >= 87  # run takes all 37, track 25, doctor 18, plan 3, trained-taps 3, demo 1


def test_run_takes_every_flag_of_every_work_section():
    run = {p.name for p in COMMANDS["run"].params}
    assert set(FLAGS) <= run


def test_run_options_defaults_are_the_sections_defaults():
    fields = {f.name: f.default for f in dataclasses.fields(RunOptions)}
    for section in WORK_SECTIONS + RUN_SECTIONS:
        for flag in section.FLAGS:
            assert fields[flag.field] == flag.default, flag.flag
    assert Batching().tap_chunk == TAP_CHUNK == fields["tap_chunk"]
    # the inputs flags are None when not given (doctor --out RUN then takes the run's); the run defaults are the
    # section's own, as RunOptions has them
    assert RunOptions(drafters=[], out=Path("x")).inputs == InputSettings() == InputSettings.given(**InputSettings.defaults())
    # --out is required and --cache-dir's run default is the user's cache (core/options.default_cache_dir)
    written = RunOptions(drafters=[], out=Path("x"), overwrite=True)
    assert written.output == Output(out=Path("x"), overwrite=True, cache_dir=written.cache_dir)
    assert written.numerics == Numerics() and fields["overwrite"] is False
    assert (InputSettings().prompts, InputSettings().max_new_tokens) == (fields["prompts"], fields["max_new_tokens"]) == ("demo", 256)


def test_the_inputs_flags_mean_the_run_defaults_when_not_given():
    from dflash_eval.cli.options import shared_settings

    given = dict(target=None, prompts=None, limit=None, seed=None, max_new_tokens=None, thinking=None, device="auto",
                 dtype="auto", cache_dir=Path("c"), semantics=[])
    options = RunOptions(drafters=[], out=Path("x"), **shared_settings(**given))
    assert options.inputs == InputSettings() and (options.seed, options.prompt_seed, options.prompts) == (0, None, "demo")
    chosen = RunOptions(drafters=[], out=Path("x"), **shared_settings(**{
        **given, "prompts": "hf:org/set", "limit": 5, "seed": 3, "max_new_tokens": 64, "thinking": False,
        "semantics": ["a=vllm"], "prompt_field": "question", "responses": Path("r.jsonl")}))
    assert (chosen.seed, chosen.prompt_seed, chosen.limit, chosen.max_new_tokens) == (3, 3, 5, 64)
    assert chosen.inputs == InputSettings(prompts="hf:org/set", prompt_field="question", limit=5, seed=3, max_new_tokens=64,
                                   thinking=False, responses=Path("r.jsonl"), semantics=("a=vllm",))
    assert chosen.semantics == ["a=vllm"] and chosen.inputs.bootstrap_seed == 3


def test_run_options_hand_each_stage_its_section():
    options = RunOptions(drafters=[], out=Path("x"), anchor_batch=64, draft_lengths="7, 3,3", depth_buckets="0,1K",
                         temperature=0.7, samples=2, context_tokens=128)
    assert options.batching == Batching(anchor_batch=64)
    assert options.serving.for_block(8, "mine") == (3, 7)
    assert options.serving.shorter(8) == (3,)  # 7 = B - 1 is the drafter's own run
    assert options.breakdown.edges == (1024,)
    assert options.sampling == Sampling(temperature=0.7, samples=2)
    assert options.long_context.tokens == 128
    placed = RunOptions(drafters=[], out=Path("x"), device_map="auto", max_memory="0=70GiB,cpu=200GiB")
    assert placed.placement.memory == {0: "70GiB", "cpu": "200GiB"} and placed.replay == Replay()
    assert RunOptions(drafters=[], out=Path("x")).serving.for_block(16) == ()
    assert Serving(draft_lengths="all").for_block(4) == (1, 2, 3)


@pytest.mark.parametrize("section, flag, message", [
    (Serving(draft_lengths="3,x"), "--draft-lengths", "expected 'all' or k,k,..."),
    (Serving(accelerator="h200", step_times=Path("t.json")), "--accelerator", "not both"),
    (Breakdown(depth_buckets="9,3"), "--depth-buckets", "increase strictly"),
    (Breakdown(depth_buckets="1M"), "--depth-buckets", "not a whole number"),
    (Breakdown(draft_window=0), "--draft-window", ">= 1"),
    (Replay(mode="offline"), "--mode", "unknown"),
    (Replay(final_block="half"), "--final-block", "unknown"),
    (Replay(kernels="triton"), "--kernels", "unknown"),
    (Placement(device_map="everywhere"), "--device-map", "unknown"),
    (Placement(max_memory="0=70GiB"), "--max-memory", "give --device-map too"),
    (Placement(device_map="auto", max_memory="70GiB"), "--max-memory", "expected DEVICE=AMOUNT"),
    (InputSettings(prompts="gsm8k", prompt_field="question"), "--prompt-field", "gsm8k builds its own prompts"),
    (Output(cache_dir=Path("/dev/null/cache")), "--cache-dir", ""),
    (ServingTarget(serving_target="/nonexistent/copy"), "--serving-target", "not a model folder"),
    (ServingTarget(serving_target="/nonexistent/copy.gguf"), "--serving-target", "no such GGUF file"),
])
def test_a_refused_value_names_its_flag(section, flag, message):
    with pytest.raises(InputError) as refused:
        section.check()
    assert flag in refused.value.problem and message in refused.value.problem


def test_a_draft_length_past_the_block_names_the_drafter():
    with pytest.raises(InputError, match=r"--draft-lengths '3,9': k = 9 outside 1..7 \(drafter mine, block size 8\)"):
        Serving(draft_lengths="3,9").for_block(8, "mine")


@pytest.mark.parametrize("section", [
    Batching(), Batching(anchor_batch=173, tap_chunk=512, generation_batch=4),
    Sampling(), Sampling(temperature=0.6, top_p=0.9, top_k=20, draft_policy="argmax", samples=4),
    Serving(), Serving(draft_lengths="3,7"),
    Breakdown(), Breakdown(depth_buckets="0,512,2048", draft_window=256),
    LongContext(context_tokens=8192), LongContext(context_tokens=512, max_context="truncate"),
    Replay(), Replay(mode="live", final_block="full", kernels="torch"),
    Placement(), Placement(device="cuda:1", dtype="bfloat16", device_map="auto", max_memory="0=70GiB", shard="1/4"),
    Numerics(), Numerics(numerics_check=4),
    Output(), Output(out=Path("o"), overwrite=True, cache_dir=Path("c")),
    InputSettings(), InputSettings(target="t", prompts="hf:a/b", prompt_field="q", limit=8, seed=1, max_new_tokens=64, thinking=True,
                     responses=Path("r.jsonl"), semantics=("vllm",)),
    ServingTarget(), ServingTarget(serving_target="copies/int4"),
])
def test_what_a_section_records_reads_back_as_the_same_section(section):
    assert type(section).from_provenance(section.provenance()) == section


def test_sampling_reads_back_from_a_run_documents_provenance():
    greedy = {"temperature": 0.0, "sampling": None, "mode": "trajectory"}
    assert Sampling.from_provenance(greedy) == Sampling()
    sampled = {"temperature": 0.8, "sampling": {"temperature": 0.8, "top_p": 0.95, "top_k": 0,
                                                "draft_policy": "argmax", "samples": 3, "seed": 0}}
    assert Sampling.from_provenance(sampled) == Sampling(temperature=0.8, top_p=0.95, draft_policy="argmax", samples=3)


def test_merge_reads_the_options_back_from_the_shards_provenance():
    prov = {"mode": "live", "temperature": 0.5, "max_new_tokens": 32, "draft_lengths": "3",
            "sampling": {"temperature": 0.5, "top_p": 1.0, "top_k": 0, "draft_policy": "argmax", "samples": 2}}
    options = RunOptions.from_provenance(prov, out=Path("m"), seed=7, depth_edges=[512, 2048])
    assert (options.mode, options.seed, options.max_new_tokens) == ("live", 7, 32)
    assert options.sampling == Sampling(temperature=0.5, draft_policy="argmax", samples=2)
    assert options.breakdown.edges == (512, 2048)
    assert options.serving.for_block(8) == (3,)
