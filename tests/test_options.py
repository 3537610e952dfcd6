"""Settings as sections (core/settings/): every command that takes a section's flag takes it as the section
declares it (same name, default, help, panel; its signature is generated from the sections, cli/options.takes),
a refused value names its flag, what a section records reads back as the same section, `RunSettings` has no
flat field, and adding an option is two edits in its section (the exercise at the end)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import pytest
import typer
from typer.testing import CliRunner

from dflash_eval.cli import app
from dflash_eval.cli.options import takes
from dflash_eval.commands.results_settings import DiffSettings, ShowSettings
from dflash_eval.commands.trained_taps_settings import TrainedTapsSettings
from dflash_eval.core.errors import InputError
from dflash_eval.core.settings.execution import Doctor, Numerics, Placement, Replay
from dflash_eval.core.settings.inputs import Drafters, InputSettings, ServingTarget
from dflash_eval.core.settings.output import Output
from dflash_eval.core.settings.run_settings import RunOptions, RunSettings, Scoring
from dflash_eval.core.settings.sections import Section, Use, setting
from dflash_eval.core.settings.work import TAP_CHUNK, Batching, Breakdown, LongContext, Sampling, Serving
from dflash_eval.serving.commands.settings import ServedSettings
from dflash_eval.training.commands.track_settings import Tracking

COMMANDS = typer.main.get_command(app).commands
RUN_SECTIONS = tuple(RunSettings.sections())
# the help a command gives a section's flag instead of the section's own: the same meaning, said for what that
# command does with it (track and doctor evaluate offline; doctor's window is a variant, not the run; plan and
# merge say what their folder or their prompts are)
VARIANT_HELP = {("track", f): h for f, h in {**Sampling.OFFLINE_HELP, **Output.TRACK_HELP}.items()} | {
    ("doctor", f): h for f, h in {**Sampling.OFFLINE_HELP, **Breakdown.DOCTOR_HELP}.items()}
# a command's own flag under a section's field name: doctor, track, demo, merge, trained-taps and the exports write
# their own folders or files; doctor and track take one --reference their own way; plan needs a target and names
# an accelerator; demo generates 64 tokens (diff's and show's --seed, their own statistics and choice, are
# their own sections');
# inspect's target and rules are a view; report, diff and served write a page where --html-file says
OWN = {("doctor", "out"), ("doctor", "reference"), ("track", "reference"), ("demo", "out"), ("demo", "max_new_tokens"),
       ("trained-taps", "out"), ("trained-taps", "overwrite"), ("export-serving", "out"), ("inspect", "target"),
       ("inspect", "semantics"), ("plan", "target"), ("plan", "accelerator"), ("plan", "doctor"), ("diff", "html"),
       ("report", "html"), ("served", "html")}  # report, diff, served: --html-file
# a command's own sections (a wing's, or a Results command's), passed to it by name
OTHER_SECTIONS = (Tracking, TrainedTapsSettings, ServedSettings, DiffSettings, ShowSettings)


def flags_of(sections):
    return {(section, flag.field): flag for section in sections for flag in section.FLAGS}


def owner(command: str, field: str):
    """The section a command's parameter comes from (its own sections first: trained-taps' --target, --seed)."""
    for section in (*OTHER_SECTIONS, *RUN_SECTIONS):
        if any(f.field == field for f in section.FLAGS):
            if section in OTHER_SECTIONS and {"track": Tracking, "trained-taps": TrainedTapsSettings,
                                              "served": ServedSettings, "diff": DiffSettings,
                                              "show": ShowSettings}.get(command) is not section:
                continue
            return section.flag(field)
    return None


def test_every_command_takes_a_section_flag_as_the_section_declares_it():
    seen = 0
    for name, command in sorted(COMMANDS.items()):
        for param in command.params:
            flag = owner(name, param.name)
            if flag is None or (name, param.name) in OWN:
                continue
            where = f"{name} {flag.flag}"
            assert tuple(param.opts) + tuple(param.secondary_opts) == tuple(
                n for names in flag.names for n in names.split("/")), where
            if flag.default is ...:
                assert param.required, where
            else:
                assert param.default == flag.default, where
            if (name, param.name) in VARIANT_HELP:
                assert param.help == VARIANT_HELP[(name, param.name)], where
            elif name not in ("plan", "merge", "demo"):  # plan, merge and demo say their own words (cli/plan.py ...)
                assert param.help == flag.help, where
            assert getattr(param, "rich_help_panel", None) == flag.panel, where
            if flag.minimum is not None:
                assert param.min == flag.minimum, where
            seen += 1
    assert seen >= 100  # run takes 44, track 29, doctor 20, plan 14, trained-taps 12, merge 3, demo 2


def test_run_takes_every_flag_of_every_section_but_doctor_s():
    run = {p.name for p in COMMANDS["run"].params}
    wanted = {flag.field for section in RUN_SECTIONS if section is not Doctor for flag in section.FLAGS}
    assert wanted <= run and not {f.field for f in Doctor.FLAGS} & run


def test_run_settings_are_the_sections_and_no_flat_field():
    assert all(issubclass(f.type if isinstance(f.type, type) else type(f.default), Section)
               for f in dataclasses.fields(RunSettings))
    assert RunOptions(argv=()) == RunSettings()  # the flat constructor with nothing given: every section's default
    assert Batching().tap_chunk == TAP_CHUNK
    # the inputs flags are None when not given (doctor --out RUN then takes the run's); the run defaults are the
    # section's own
    assert InputSettings.from_flags({f.field: f.default for f in InputSettings.FLAGS}) == InputSettings()
    assert (InputSettings().prompts, InputSettings().max_new_tokens) == ("demo", 256)


# the command whose --seed still has its own help: trained-taps' section moves with the training wing (issue 50,
# branch i50-wings); its meaning is the statistics family's, and it takes seeds.statistics_seed there
def test_every_seed_flag_is_one_of_three_families():
    """--seed means one thing per family (core/settings/seeds.py): the run's draws (run, doctor, track), a
    comparison's statistics (diff, trained-taps) or show's --random choice; a command that declares its own
    --seed help, or a family whose commands disagree, fails here."""
    from dflash_eval.core.settings import seeds

    helps = {family: make("PANEL").help for family, make in seeds.FAMILIES.items()}
    found = {}
    for name, command in COMMANDS.items():
        for param in command.params:
            if "--seed" in getattr(param, "opts", ()):
                found[name] = next((family for family, text in helps.items() if param.help == text), None)
    assert found == {"run": "run", "doctor": "run", "track": "run", "diff": "statistics", "show": "choice",
                     "trained-taps": "statistics"}


def test_the_flat_constructor_hands_each_keyword_to_its_section():
    settings = RunOptions(drafters=["a:x"], out=Path("x"), anchor_batch=64, draft_lengths="7, 3,3", depth_buckets="0,1K",
                          temperature=0.7, samples=2, context_tokens=128, seed=3, limit=5, final_block="full",
                          context_variants=False, explain=False, argv=["dflash-eval", "run"])
    assert settings.drafters == Drafters(drafters=("a:x",))
    assert settings.batching == Batching(anchor_batch=64)
    assert settings.serving.for_block(8, "mine") == (3, 7) and settings.serving.shorter(8) == (3,)
    assert settings.breakdown.edges == (1024,)
    assert settings.sampling == Sampling(temperature=0.7, samples=2)
    assert settings.long_context.tokens == 128
    assert (settings.inputs.seed, settings.seed, settings.inputs.limit) == (3, 3, 5)
    assert settings.inputs.given == {"seed", "limit"}  # what doctor --out RUN must not take from the run
    assert settings.scoring == Scoring(256, "full", 64)
    assert not settings.doctor.context_variants and not settings.explanation.explain
    assert settings.output == Output(out=Path("x"), argv=("dflash-eval", "run"))
    assert RunOptions().seed == 0  # without --seed: the first N prompts, the bootstrap seeded with 0
    with pytest.raises(TypeError, match="no setting 'prompt_seed'"):  # one meaning, one name
        RunOptions(prompt_seed=3)
    placed = RunOptions(device_map="auto", max_memory="0=70GiB,cpu=200GiB", shard="1/4").placement.resolve()
    assert (placed.shard, placed.max_memory) == ((1, 4), {0: "70GiB", "cpu": "200GiB"})
    assert placed.load_keywords() == {"device_map": "auto", "max_memory": {0: "70GiB", "cpu": "200GiB"}}
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
    (Placement(shard="4/4"), "--shard", "expected I/N"),
    (Sampling(temperature=float("nan")), "--temperature", "finite"),
    (Sampling(temperature=1e-40), "--temperature", "overflow"),
    (Sampling(top_p=0), "--top-p", "(0, 1]"),
    (Sampling(draft_policy="greedy"), "--draft-policy", "unknown"),
    (Sampling(samples=2), "--samples", "needs --temperature"),
    (Sampling(samples=2000, temperature=1), "--samples", "1 to 1024"),
    (LongContext(max_context="cut"), "--max-context", "refuse or truncate"),
    (LongContext(context_tokens=32), "--context-tokens", "at least 64"),
    (InputSettings(prompts="gsm8k", prompt_field="question"), "--prompt-field", "gsm8k builds its own prompts"),
    (Output(cache_dir=Path("/dev/null/cache")), "--cache-dir", ""),
    (Tracking(interval=0.0), "--interval", "> 0"),
    (TrainedTapsSettings(layer_ids="2,x"), "--layer-ids", "integers"),
    (ServedSettings(logit_gap=True), "--logit-gap", "pairs with --per-request"),
    (ServedSettings(per_request=Path("r.jsonl")), "--per-request", "needs --run"),
    (ShowSettings(worst=3, first=2), "--worst and --first", "give one of them"),
    (ShowSettings(flagged=True, first=2), "--flagged", "give --worst N instead"),
    (RunOptions(temperature=0.5, responses=Path("r.jsonl")), "--responses", "cannot be combined"),
    (RunOptions(temperature=0.5, draft_lengths="3"), "--draft-lengths", "needs --mode live"),
    (RunOptions(numerics_check=2, mode="live"), "--numerics-check", "--mode trajectory"),
    (RunOptions(context_tokens=128), "--context-tokens", "repo:PATH or stdlib"),
    (RunOptions(temperature=0.5, semantics=["sglang"]), "--semantics sglang", "greedy only"),
    (ServingTarget(serving_target="/nonexistent/copy"), "--serving-target", "not a model folder"),
    (ServingTarget(serving_target="/nonexistent/copy.gguf"), "--serving-target", "no such GGUF file"),
])
def test_a_refused_value_names_its_flag(section, flag, message):
    with pytest.raises(InputError) as refused:
        section.check()
    assert flag in refused.value.problem and message in refused.value.problem


def test_one_check_runs_every_rule_before_anything_is_read():
    """RunSettings.check refuses each section's bad value and every rule between sections, with nothing on disk."""
    for bad in (dict(mode="x"), dict(temperature=-1.0), dict(samples=3), dict(shard="x"), dict(depth_buckets="5,1"),
                dict(draft_window=0), dict(max_context="cut"), dict(prompts="demo", prompt_field="q"),
                dict(accelerator="h100", step_times=Path("t")), dict(numerics_check=1, temperature=0.5)):
        with pytest.raises(InputError):
            RunOptions(**bad).check()
    RunOptions(prompts="repo:x", context_tokens=256, max_context="truncate").check()


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
    Output(), Output(out=Path("o"), overwrite=True, cache_dir=Path("c"), html=False),
    InputSettings(), InputSettings(target="t", prompts="hf:a/b", prompt_field="q", limit=8, seed=1, max_new_tokens=64,
                                   thinking=True, responses=Path("r.jsonl"), semantics=("vllm",)),
    Drafters(drafters=("a", "b:c"), reference="z-lab"), Doctor(context_variants=False, trained_taps=Path("d")),
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


def test_merge_reads_the_settings_back_from_the_shards_provenance():
    prov = {"mode": "live", "temperature": 0.5, "max_new_tokens": 32, "draft_lengths": "3",
            "sampling": {"temperature": 0.5, "top_p": 1.0, "top_k": 0, "draft_policy": "argmax", "samples": 2}}
    settings = RunSettings.from_provenance(prov, out=Path("m"), seed=7, depth_edges=[512, 2048])
    assert (settings.replay.mode, settings.seed, settings.inputs.max_new_tokens) == ("live", 7, 32)
    assert settings.sampling == Sampling(temperature=0.5, draft_policy="argmax", samples=2)
    assert settings.breakdown.edges == (512, 2048)
    assert settings.serving.for_block(8) == (3,)


def test_the_one_sampling_value_is_the_sections():
    """One `Sampling`: the live loop and the estimate take the section itself (model/sampling.py draws with it)."""
    from dflash_eval.model import sampling

    assert sampling.Sampling is Sampling
    assert Sampling(temperature=0.5).to_dict() == {"temperature": 0.5, "top_p": 1.0, "top_k": 0, "draft_policy": "sample"}


# ------------------------------------------------------------------------------------------ the exercise

OPTION = "Exercise (a test-only section)"


@dataclass(frozen=True)
class Before(Section):
    """A test-only section, as it stood before a new option."""

    width: int = 3

    FLAGS = (setting("width", "--width", int, 3, "How wide.", OPTION, minimum=1),)


@dataclass(frozen=True)
class After(Section):
    """The same section after adding `--depth`: the two edits are the field and its Flag (marked)."""

    width: int = 3
    depth: Optional[int] = None  # edit 1 of 2: the field

    FLAGS = (setting("width", "--width", int, 3, "How wide.", OPTION, minimum=1),
             setting("depth", "--depth", Optional[int], None, "How deep (default: as wide).", OPTION,  # edit 2 of 2
                     minimum=1))


def exercise_app(section):
    """A command that takes the section (and the run's batching): nothing in it names a flag."""
    received = {}
    one = typer.Typer()

    @one.command()
    @takes(Use(Batching, only=("anchor_batch",)), exercise=section)
    def command(settings: RunSettings, exercise: section) -> None:
        received.update(exercise=exercise, anchor_batch=settings.batching.anchor_batch)

    return one, received


def test_adding_an_option_is_a_field_and_a_flag_in_its_section():
    # the two edits, and nothing else: one field, one Flag (no command, no keyword list, no CLI module touched)
    assert [f.name for f in dataclasses.fields(After)] == [f.name for f in dataclasses.fields(Before)] + ["depth"]
    assert [f.flag for f in After.FLAGS] == [f.flag for f in Before.FLAGS] + ["--depth"]
    runner = CliRunner()
    before, _ = exercise_app(Before)
    after, received = exercise_app(After)
    assert "--depth" not in runner.invoke(before, ["--help"]).output
    shown = runner.invoke(after, ["--help"], terminal_width=200).output
    assert "--depth" in shown and "How deep (default: as wide)." in shown and OPTION.split(" (")[0] in shown
    result = runner.invoke(after, ["--width", "5", "--depth", "7", "--anchor-batch", "9"])
    assert result.exit_code == 0, result.output
    assert received == {"exercise": After(width=5, depth=7), "anchor_batch": 9}
    refused = runner.invoke(after, ["--depth", "0"])  # the Flag's bound, with no code of the command's
    assert refused.exit_code == 2 and "--depth" in refused.output
    assert After.from_provenance(After(width=2, depth=4).provenance()) == After(width=2, depth=4)
    runner.invoke(after, [])
    assert received["exercise"] == After()  # not given: the section's default
