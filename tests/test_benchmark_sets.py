"""The paper's prompt sets from the local Hugging Face cache: the same user messages as z-lab's benchmark code
on the same rows, the same files and row order as `datasets` reads, and the paper's draw.

Every dataset is written into a temporary hub cache in huggingface_hub's layout (blobs, snapshot symlinks,
refs/main), with each set's real column names. z-lab's installed `dflash==0.1.0` (dflash/benchmark.py)
loads the same snapshots through `datasets.load_dataset` on the snapshot folder: the one substitution is
the Hub itself (repo id -> its files), datasets resolves and reads them.
"""

from __future__ import annotations

import pytest

from dflash_eval.core.errors import InputError

BOXED = "\nPlease reason step by step, and put your final answer within \\boxed{}."


@pytest.fixture(scope="module")
def zlab(hf_hub, tmp_path_factory):
    """z-lab's benchmark module, its `datasets.load_dataset` reading the cached snapshot folder of a repo id."""
    import datasets
    import dflash.benchmark as benchmark

    real, scratch = datasets.load_dataset, tmp_path_factory.mktemp("datasets-cache")

    def from_cache(repo, *args, **kwargs):
        if repo.startswith("/"):
            return real(repo, *args, **kwargs)  # a snapshot folder (the other tests here), as it is
        folder = hf_hub / ("datasets--" + repo.replace("/", "--")) / "snapshots"
        (snapshot,) = list(folder.iterdir())
        return real(str(snapshot), *args, cache_dir=str(scratch), **kwargs)

    mp = pytest.MonkeyPatch()
    mp.setattr(datasets, "load_dataset", from_cache)
    yield benchmark
    mp.undo()


def _turns(prompts) -> list[list[str]]:
    """Our prompts as z-lab's {"turns"} lists: each conversation's user messages, in order."""
    out = []
    for p in prompts:
        if p.after is None:
            out.append([p.text])
        else:
            out[-1].append(p.chat()[-1]["content"])
    return out


@pytest.mark.parametrize("name", ["gsm8k", "math500", "mt-bench", "humaneval", "mbpp"])
def test_each_named_set_builds_zlab_0_1_0s_user_messages_on_the_same_rows(zlab, name):
    from dflash_eval.pipeline.prompts import load_prompts

    theirs = [row["turns"] for row in zlab.load_and_process_dataset(name)]
    assert _turns(load_prompts(name)) == theirs
    # dflash 0.1.0's draw (`_select_dataset`: random.Random(42)) is our --limit N --seed 42, conversation-wise
    drawn = zlab._select_dataset(zlab.load_and_process_dataset(name), 4)
    ours = _turns(load_prompts(name, limit=4, seed=42))
    assert sorted(ours) == sorted(row["turns"] for row in drawn) and len(ours) == 4


def test_the_boxed_instruction_is_zlab_s_text():
    import dflash.benchmark as benchmark

    from dflash_eval.formats.benchmark_sets import BENCHMARK_SETS

    for name, column in (("gsm8k", "question"), ("math500", "problem")):
        row = {column: "What is {1}?", "unique_id": "u"}
        assert BENCHMARK_SETS[name].turns(row) == [benchmark.DATASETS[name]["format"](row)] == ["What is {1}?" + BOXED]


def test_sets_not_in_0_1_0_follow_zlab_s_init_commit(hf_hub):
    """aime24/aime25/alpaca/swe-bench/livecodebench as z-lab/dflash bb48ef9 model/utils.py builds them (texts
    written out by hand from that code); livecodebench reads test.jsonl .. test6.jsonl only, in that order."""
    from dflash_eval.pipeline.prompts import load_prompts

    aime24 = load_prompts("aime24")
    assert [(p.id, p.set, p.text) for p in aime24] == [("aime24/60", "aime24", "Every morning Aya walks." + BOXED),
                                                      ("aime24/61", "aime24", "Let $ABC$ be a triangle." + BOXED)]
    assert [p.id for p in load_prompts("aime25")] == ["aime25/1", "aime25/2"]
    assert load_prompts("aime25")[0].text == "Find the sum of all bases." + BOXED
    assert [p.text for p in load_prompts("alpaca")] == [
        "Give three tips for staying healthy.", "Classify the sentence.\n\nInput:\nThe sky is blue."]
    swe = load_prompts("swe-bench")
    assert [p.id for p in swe] == [f"swe-bench/astropy__astropy-{i}" for i in range(3)]  # the test split, not dev
    assert swe[1].text == "Problem Statement:\nproblem_statement 1\nline\nPlease fix the issue described above."
    lcb = load_prompts("livecodebench")
    assert [p.id for p in lcb] == [f"livecodebench/{k}{x}" for k in range(6) for x in "ab"]
    system = ("You are an expert Python programmer. You will be given a question (problem specification) and will "
              "generate a correct Python program that matches the specification and passes all tests. You will NOT "
              "return anything except for the program")
    assert lcb[0].text == (system + "\n\n### Question:\nSolve 0a.\n\n### Format: Use the following code structure:\n"
                           "```python\nclass Solution:\n    def f(self):\n        \n```\n\n"
                           "### Answer: (use the provided format with backticks)")
    assert lcb[1].text == (system + "\n\n### Question:\nSolve 0b.\n\n### Format: Write your code in the following "
                           "format:\n```python\n# YOUR CODE HERE\n```\n\n### Answer: (use the provided format with backticks)")


@pytest.mark.parametrize("repo,config,split", [
    ("openai/gsm8k", "main", "test"), ("openai/gsm8k", "socratic", "test"), ("HuggingFaceH4/MATH-500", None, "test"),
    ("princeton-nlp/SWE-bench_Lite", None, "test"), ("princeton-nlp/SWE-bench_Lite", None, "dev"),
    ("tatsu-lab/alpaca", None, "train"), ("HuggingFaceH4/mt_bench_prompts", None, "train"),
    ("google-research-datasets/mbpp", "sanitized", "test"), ("someone/chats", None, "train"),
    ("HuggingFaceH4/aime_2024", None, "train"), ("MathArena/aime_2025", None, "train"),
    ("openai/openai_humaneval", None, "test")])
def test_the_files_and_rows_of_a_split_are_the_ones_datasets_reads(hf_hub, tmp_path, repo, config, split):
    import datasets

    from dflash_eval.formats import hf_cache

    snapshot = hf_cache.find_snapshot(repo)
    assert snapshot.revision == (hf_hub / ("datasets--" + repo.replace("/", "--")) / "refs" / "main").read_text()
    _, _, files = hf_cache.data_files(snapshot, config, split)
    theirs = datasets.load_dataset(str(snapshot.folder), config, split=split, cache_dir=str(tmp_path))
    assert hf_cache.read_rows(snapshot, files) == theirs.to_list()


def test_the_paper_s_rows_are_datasets_shuffle_with_seed_0(hf_hub):
    """benchmark.py at bb48ef9..4850ba9: dataset.shuffle(seed=0).select(range(N)) when longer than N."""
    import datasets

    from dflash_eval.formats.benchmark_sets import paper_indices
    from dflash_eval.pipeline.prompts import load_prompts, prompt_set

    for total, rows in ((1319, 128), (257, 128), (20, 7), (30, 30), (10, 128)):
        table = datasets.Dataset.from_dict({"i": list(range(total))})
        drawn = table.shuffle(seed=0).select(range(rows))["i"] if total > rows else list(range(total))
        assert paper_indices(total, rows) == sorted(drawn)
    whole = load_prompts("gsm8k")
    from dflash_eval.formats import benchmark_sets

    assert len(load_prompts("paper:gsm8k")) == 20  # 20 rows here, under the paper's 128: all of them
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(benchmark_sets.BENCHMARK_SETS, "gsm8k",
                   __import__("dataclasses").replace(benchmark_sets.BENCHMARK_SETS["gsm8k"], paper_rows=7))
        assert [p.id for p in load_prompts("paper:gsm8k")] == [whole[i].id for i in paper_indices(20, 7)]
    mbpp = prompt_set("mbpp")
    assert [p.id for p in load_prompts("paper:mbpp")] == [mbpp[i].id for i in paper_indices(257, 128)]
    assert len(load_prompts("paper:mbpp", limit=5)) == 5 and len(load_prompts("paper:humaneval")) == 164
    with pytest.raises(InputError, match="no set 'demo'"):
        load_prompts("paper:demo")


def test_published_comparison_says_when_the_prompts_are_not_the_paper_s_rows():
    from dflash_eval.formats.references import published_comparison

    base = {"target": {"name": "Qwen/Qwen3-8B"}, "temperature": 0, "enable_thinking": False, "max_new_tokens": 2048}
    (line,) = published_comparison({**base, "prompts": {"source": "gsm8k", "sets": {"gsm8k": 1319}}}, [16])
    assert "1319 gsm8k prompts (paper: 128; --prompts paper:gsm8k gives its rows)" in line
    (line,) = published_comparison({**base, "prompts": {"source": "gsm8k", "limit": 128, "sets": {"gsm8k": 128}}}, [16])
    assert "not the paper's draw of gsm8k" in line
    for source, sets in (("paper:gsm8k", {"gsm8k": 128}), ("mt-bench", {"mt-bench": 160}), ("aime25", {"aime25": 30})):
        (line,) = published_comparison({**base, "prompts": {"source": source, "sets": sets}}, [16])
        assert line.endswith("same settings"), line
