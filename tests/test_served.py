"""`dflash-eval served`: vLLM /metrics dumps written exactly as prometheus_client writes vLLM's counters
(`SpecDecodingProm`: `NAME_total` + a `NAME_created` gauge, labels sorted), `vllm bench serve` results as its
`benchmarks/serve.py` saves them, SGLang's gauge; hand-computed answers; the gap to a real offline run."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from dflash_eval.cli import app
from dflash_eval.serving.counters import counts as S
from dflash_eval.serving.counters import gap as G

runner = CliRunner()

# Verbatim from prometheus_client 0.26 `generate_latest`, registry holding vLLM 0.33's four spec-decode counters
# (v1/spec_decode/metrics.py) with labelnames ["model_name", "engine"] (v1/metrics/loggers.py), k = 3.
VERBATIM = """\
# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="Qwen/Qwen3-8B"} 10.0
# HELP vllm:spec_decode_num_drafts_created Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_created gauge
vllm:spec_decode_num_drafts_created{engine="0",model_name="Qwen/Qwen3-8B"} 1.7961430715948806e+09
# HELP vllm:spec_decode_num_draft_tokens_total Number of draft tokens.
# TYPE vllm:spec_decode_num_draft_tokens_total counter
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="Qwen/Qwen3-8B"} 30.0
# HELP vllm:spec_decode_num_draft_tokens_created Number of draft tokens.
# TYPE vllm:spec_decode_num_draft_tokens_created gauge
vllm:spec_decode_num_draft_tokens_created{engine="0",model_name="Qwen/Qwen3-8B"} 1.7961430715949125e+09
# HELP vllm:spec_decode_num_accepted_tokens_total Number of accepted tokens.
# TYPE vllm:spec_decode_num_accepted_tokens_total counter
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="Qwen/Qwen3-8B"} 12.0
# HELP vllm:spec_decode_num_accepted_tokens_created Number of accepted tokens.
# TYPE vllm:spec_decode_num_accepted_tokens_created gauge
vllm:spec_decode_num_accepted_tokens_created{engine="0",model_name="Qwen/Qwen3-8B"} 1.796143071594937e+09
# HELP vllm:spec_decode_num_accepted_tokens_per_pos_total Accepted tokens per draft position.
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="Qwen/Qwen3-8B",position="0"} 6.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="Qwen/Qwen3-8B",position="1"} 4.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="Qwen/Qwen3-8B",position="2"} 2.0
# HELP vllm:spec_decode_num_accepted_tokens_per_pos_created Accepted tokens per draft position.
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_created gauge
vllm:spec_decode_num_accepted_tokens_per_pos_created{engine="0",model_name="Qwen/Qwen3-8B",position="0"} 1.796143071594966e+09
vllm:spec_decode_num_accepted_tokens_per_pos_created{engine="0",model_name="Qwen/Qwen3-8B",position="1"} 1.796143071594986e+09
vllm:spec_decode_num_accepted_tokens_per_pos_created{engine="0",model_name="Qwen/Qwen3-8B",position="2"} 1.7961430715950031e+09
"""

# The same registry through prometheus_client's OpenMetrics writer (`Accept: application/openmetrics-text`).
OPENMETRICS = """\
# HELP vllm:spec_decode_num_drafts Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts counter
vllm_spec_decode_num_drafts_total{engine="0",model_name="Qwen/Qwen3-8B"} 10.0
vllm_spec_decode_num_drafts_created{engine="0",model_name="Qwen/Qwen3-8B"} 1.7961430715948806e+09
# HELP vllm:spec_decode_num_draft_tokens Number of draft tokens.
# TYPE vllm:spec_decode_num_draft_tokens counter
vllm_spec_decode_num_draft_tokens_total{engine="0",model_name="Qwen/Qwen3-8B"} 30.0
vllm_spec_decode_num_draft_tokens_created{engine="0",model_name="Qwen/Qwen3-8B"} 1.7961430715949125e+09
# HELP vllm:spec_decode_num_accepted_tokens Number of accepted tokens.
# TYPE vllm:spec_decode_num_accepted_tokens counter
vllm_spec_decode_num_accepted_tokens_total{engine="0",model_name="Qwen/Qwen3-8B"} 12.0
vllm_spec_decode_num_accepted_tokens_created{engine="0",model_name="Qwen/Qwen3-8B"} 1.796143071594937e+09
# HELP vllm:spec_decode_num_accepted_tokens_per_pos Accepted tokens per draft position.
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos counter
vllm_spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="Qwen/Qwen3-8B",position="0"} 6.0
vllm_spec_decode_num_accepted_tokens_per_pos_created{engine="0",model_name="Qwen/Qwen3-8B",position="0"} 1.796143071594966e+09
vllm_spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="Qwen/Qwen3-8B",position="1"} 4.0
vllm_spec_decode_num_accepted_tokens_per_pos_created{engine="0",model_name="Qwen/Qwen3-8B",position="1"} 1.796143071594986e+09
vllm_spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="Qwen/Qwen3-8B",position="2"} 2.0
vllm_spec_decode_num_accepted_tokens_per_pos_created{engine="0",model_name="Qwen/Qwen3-8B",position="2"} 1.7961430715950031e+09
# EOF
"""

DOCS = {"num_drafts": "Number of spec decoding drafts.", "num_draft_tokens": "Number of draft tokens.",
        "num_accepted_tokens": "Number of accepted tokens.", "num_accepted_tokens_per_pos": "Accepted tokens per draft position."}


def vllm_dump(series, created=1.7e9, per_pos=True, created_lines=True, others=True) -> str:
    """prometheus_client's text format for vLLM's counters: series = {(model, engine): (drafts, tokens, accepted,
    [per position])}; each family `_total` then `_created` (absent in multiprocess mode), labels sorted."""
    out = ["# HELP vllm:num_requests_running Number of requests in model execution batches.",
           "# TYPE vllm:num_requests_running gauge"] if others else []
    out += [f'vllm:num_requests_running{{engine="{e}",model_name="{m}"}} 0.0' for m, e in series] if others else []
    for index, name in enumerate(DOCS):
        if name.endswith("per_pos") and not per_pos:
            continue
        for suffix, kind in (("total", "counter"), ("created", "gauge")):
            if suffix == "created" and not created_lines:
                continue
            out += [f"# HELP vllm:spec_decode_{name}_{suffix} {DOCS[name]}", f"# TYPE vllm:spec_decode_{name}_{suffix} {kind}"]
            for (model, engine), values in series.items():
                labels = f'engine="{engine}",model_name="{model}"'
                stamp = created + int(engine) if isinstance(created, (int, float)) else created[(model, engine)]
                if name.endswith("per_pos"):
                    for pos, n in enumerate(values[3]):
                        value = float(n) if suffix == "total" else stamp
                        out.append(f'vllm:spec_decode_{name}_{suffix}{{{labels},position="{pos}"}} {value!r}')
                else:
                    value = float(values[index]) if suffix == "total" else stamp
                    out.append(f"vllm:spec_decode_{name}_{suffix}{{{labels}}} {value!r}")
    return "\n".join(out) + "\n"


def served(tmp_path, *texts, args=(), name="dump"):
    paths = []
    for i, text in enumerate(texts):
        path = tmp_path / f"{name}{i}.txt"
        path.write_text(text)
        paths.append(str(path))
    return runner.invoke(app, ["served", *paths, *args], env={"COLUMNS": "200"})


def as_json(result) -> dict:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_one_dump_gives_served_tau_and_per_position_by_hand(tmp_path):
    for text in (VERBATIM, OPENMETRICS):
        data = as_json(served(tmp_path, text, args=["--json"]))
        assert data["tau"] == pytest.approx(1 + 12 / 10) and data["per_position"] == pytest.approx([0.6, 0.4, 0.2])
        assert data["served"]["counts"] == {"drafts": 10, "draft_tokens": 30, "accepted": 12, "accepted_per_pos": [6, 4, 2]}
        # every draft of full length 3: n = 0, 1, 2, 3 for 4, 2, 2, 2 drafts
        assert data["served"]["accept_length_histogram"] == [4, 2, 2, 2]
    # the test's writer writes exactly what prometheus_client writes (up to the created times and other metrics)
    mine = vllm_dump({("Qwen/Qwen3-8B", "0"): (10, 30, 12, [6, 4, 2])}, others=False)
    def strip(text):
        return [ln.rsplit(" ", 1)[0] if "_created{" in ln else ln for ln in text.splitlines()]
    assert strip(mine) == strip(VERBATIM)
    shown = served(tmp_path, VERBATIM)
    assert shown.exit_code == 0 and "served tau (1 + accepted / drafts): 2.200" in shown.stdout


def test_engines_of_a_model_are_pooled_and_models_are_chosen_by_name(tmp_path):
    text = vllm_dump({("a/drafted", "0"): (10, 30, 12, [6, 4, 2]), ("a/drafted", "1"): (30, 90, 18, [10, 6, 2]),
                      ("other", "0"): (5, 15, 15, [5, 5, 5])})
    refused = served(tmp_path, text)
    assert refused.exit_code == 2 and "serves 2 models ('a/drafted', 'other'): choose one with --model" in refused.output
    assert "Traceback" not in refused.output
    data = as_json(served(tmp_path, text, args=["--model", "a/drafted", "--json"]))
    assert data["tau"] == pytest.approx(1 + 30 / 40) and data["per_position"] == pytest.approx([16 / 40, 10 / 40, 4 / 40])
    assert data["served"]["series_pooled"] == ['{engine="0"}', '{engine="1"}']
    assert as_json(served(tmp_path, text, args=["--model", "other", "--json"]))["tau"] == 4.0
    missing = served(tmp_path, text, args=["--model", "nope"])
    assert missing.exit_code == 2 and "serves no model 'nope'" in missing.output


def test_two_dumps_are_subtracted_and_a_reset_between_them_is_refused_by_name(tmp_path):
    before = vllm_dump({("m", "0"): (100, 300, 120, [60, 40, 20]), ("m", "1"): (50, 150, 30, [20, 8, 2])})
    after = vllm_dump({("m", "0"): (110, 330, 150, [70, 50, 30]), ("m", "1"): (70, 210, 40, [26, 12, 2])})
    data = as_json(served(tmp_path, before, after, args=["--json"]))
    # (110-100) + (70-50) = 30 drafts, (150-120) + (40-30) = 40 accepted
    assert data["tau"] == pytest.approx(1 + 40 / 30)
    assert data["per_position"] == pytest.approx([(10 + 6) / 30, (10 + 4) / 30, 10 / 30])
    # a restart: the counters were created anew (here they even grew past BEFORE)
    restarted = vllm_dump({("m", "0"): (200, 600, 250, [120, 80, 50]), ("m", "1"): (70, 210, 40, [26, 12, 2])},
                          created={("m", "0"): 1.8e9, ("m", "1"): 1.7e9 + 1})
    refused = served(tmp_path, before, restarted)
    assert refused.exit_code == 2
    assert ('counter reset between the dumps: vllm:spec_decode_num_drafts_total{engine="0"} was created anew'
            in refused.output)
    # multiprocess mode writes no _created lines: a value that fell is the reset
    fell = served(tmp_path, vllm_dump({("m", "0"): (100, 300, 120, [60, 40, 20])}, created_lines=False),
                  vllm_dump({("m", "0"): (7, 21, 3, [2, 1, 0])}, created_lines=False))
    assert fell.exit_code == 2 and "vllm:spec_decode_num_drafts_total{engine=\"0\"} fell from 100 to 7" in fell.output
    engines = served(tmp_path, before, vllm_dump({("m", "0"): (110, 330, 150, [70, 50, 30])}))
    assert engines.exit_code == 2 and "the engines differ between the dumps" in engines.output


def test_a_dump_without_per_position_series_gives_tau_only(tmp_path):
    data = as_json(served(tmp_path, vllm_dump({("m", "0"): (8, 24, 10, [])}, per_pos=False), args=["--json"]))
    assert data["tau"] == pytest.approx(1 + 10 / 8) and data["per_position"] is None
    assert any("no vllm:spec_decode_num_accepted_tokens_per_pos series" in n for n in data["served"]["notes"])


def test_bench_serve_results_and_sglang_gauges(tmp_path):
    result = {"date": "20260101-000000", "backend": "vllm", "model_id": "m", "num_prompts": 8,
              "spec_decode_acceptance_rate": 40.0, "spec_decode_acceptance_length": 2.2, "spec_decode_num_drafts": 10,
              "spec_decode_draft_tokens": 30, "spec_decode_accepted_tokens": 12,
              "spec_decode_per_position_acceptance_rates": [6 / 10, 4 / 10, 2 / 10]}
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(result))
    data = as_json(runner.invoke(app, ["served", str(path), "--json"]))
    assert data["tau"] == pytest.approx(2.2) and data["served"]["counts"]["accepted_per_pos"] == [6, 4, 2]
    assert any("all models and engines pooled" in n for n in data["served"]["notes"])
    path.write_text(json.dumps(result) + "\n" + json.dumps(result))  # --append-result
    appended = runner.invoke(app, ["served", str(path)])
    assert appended.exit_code == 2 and "holds 2 results (--append-result)" in appended.output
    # SGLang: a gauge per rank (labels from SchedulerMetricsCollector), no counts
    sglang = ("# HELP sglang:spec_accept_length The average acceptance length of speculative decoding.\n"
              "# TYPE sglang:spec_accept_length gauge\n"
              'sglang:spec_accept_length{model_name="m",pp_rank="0",tp_rank="0"} 3.25\n'
              'sglang:spec_accept_length{model_name="m",pp_rank="0",tp_rank="1"} 3.25\n')
    data = as_json(served(tmp_path, sglang, args=["--json"]))
    assert data["tau"] == 3.25 and data["per_position"] is None and data["served"]["engine"] == "sglang"
    disagree = served(tmp_path, sglang.replace("} 3.25\n", "} 3.5\n", 1))
    assert disagree.exit_code == 2 and "differs between the ranks" in disagree.output
    twice = served(tmp_path, sglang, sglang)
    assert twice.exit_code == 2 and "SGLang's acceptance length is a gauge" in twice.output


def test_bad_dumps_get_one_line_naming_the_file(tmp_path):
    broken = served(tmp_path, VERBATIM.replace("} 12.0", "} twelve"), name="broken")
    assert broken.exit_code == 2 and "broken0.txt" in broken.output and "line 15: value 'twelve' is not a number" in broken.output
    assert "Traceback" not in broken.output
    none = served(tmp_path, "# HELP x y\nx_total 3.0\n", name="plain")
    assert none.exit_code == 2 and "holds neither vllm:spec_decode_*_total" in none.output
    fractional = served(tmp_path, VERBATIM.replace("} 10.0", "} 10.5"))
    assert fractional.exit_code == 2 and "is 10.5, not a count" in fractional.output


def test_labels_with_escapes_are_read_exactly():
    [sample] = S.parse_exposition('x_total{model_name="a\\"b\\\\c\\nd",engine="0",} 4.0 1700000000000\n')
    assert sample.label("model_name") == 'a"b\\c\nd' and sample.value == 4.0


def test_intervals_by_hand():
    low, high = G.wilson(5, 10)
    assert (round(low, 4), round(high, 4)) == (0.2366, 0.7634)
    # Newcombe (1998), Stat Med 17:873, table II example (56/70 vs 48/80): method 10 gives 0.0524 to 0.3339
    d, lo, hi = G.proportion_gap(56, 70, 48, 80)
    assert (round(d, 4), round(lo, 4), round(hi, 4)) == (0.2, 0.0524, 0.3339)
    # two histograms over n: means 1.0 (var 2/3 over 3 steps) and 0.5 (var 1/4 over 2 steps)
    gap, lo, hi = G.mean_gap([1, 1, 1], [1, 1])
    half = G.Z95 * ((2 / 3) / 3 + (1 / 4) / 2) ** 0.5
    assert gap == 0.5 and lo == pytest.approx(0.5 - half) and hi == pytest.approx(0.5 + half)


def test_beside_an_offline_run_the_gap_per_position_has_an_interval(drafter_dirs, test_bed, tmp_path):
    out = tmp_path / "run"
    made = runner.invoke(app, ["run", "-d", str(drafter_dirs["sliding"]), "--target", str(test_bed["qwen3"]),
                               "--out", str(out), "--cache-dir", str(tmp_path / "cache"), "--limit", "2",
                               "--max-new-tokens", "24"])
    assert made.exit_code == 0, made.output
    counts = json.loads((out / "run.json").read_text())["drafters"][0]["counts"]
    steps, reach = counts["steps"], counts["reach_counts"]
    # the server accepted slot 1 on every draft, never slot 2 or 3 (0.34, 0, 0 in speculators #613's shape)
    served_pos = [steps, 0, 0]
    dump = vllm_dump({("m", "0"): (steps, 3 * steps, steps, served_pos)})
    data = as_json(served(tmp_path, dump, args=["--json", "--run", str(out)]))
    rows = data["gap"]["per_position"]
    assert [r["offline"] for r in rows] == pytest.approx([r / steps for r in reach])
    for row, mine, theirs in zip(rows, served_pos, reach):
        d, lo, hi = G.proportion_gap(mine, steps, theirs, steps)
        assert (row["gap"], row["low"], row["high"]) == (d, lo, hi) and lo <= d <= hi
    tau = data["gap"]["tau"]  # full-length drafts: the served histogram [0, steps, 0, 0] is known
    hist = counts["accept_length_histogram"]
    assert tau["gap"] == pytest.approx(1 - sum(i * c for i, c in enumerate(hist)) / steps) and tau["low"] is not None
    causes = data["likely_causes"]
    assert any("mixes sliding and full layers: vLLM 0.33 serves it only on the V2 model runner" in c for c in causes)
    assert any("offline run is at temperature 0" in c for c in causes)
    text = served(tmp_path, dump, args=["--run", str(out), "--html-file", str(tmp_path / "served.html")])
    assert text.exit_code == 0 and "likely causes:" in text.stdout
    assert "What the server measured" in (tmp_path / "served.html").read_text()
    short = as_json(served(tmp_path, vllm_dump({("m", "0"): (4, 8, 2, [2, 0])}), args=["--json", "--run", str(out)]))
    assert short["gap"]["tau"]["comparable"] is False
    assert any("draft length: the server drafts 2 tokens per step, the offline run 3" in c for c in short["likely_causes"])


# ------------------------------------------------------------------ served as vLLM reads it: partial rotary


def _with_partial_rotary(source, out, factor=0.5, top_level=False):
    import shutil

    shutil.copytree(source, out)
    config = json.loads((out / "config.json").read_text())
    body = config.get("transformer_layer_config", config)
    if top_level:
        body["partial_rotary_factor"] = factor
    else:
        body.setdefault("rope_parameters", {"rope_type": "default", "rope_theta": body.get("rope_theta", 1e6)})
        body["rope_parameters"]["partial_rotary_factor"] = factor
    (out / "config.json").write_text(json.dumps(config))
    return out


def test_vllm_rotates_only_part_of_each_head(drafter_dirs, tmp_path):
    import torch

    from dflash_eval.core.semantics import apply_semantics, rotary_dim
    from dflash_eval.formats.checkpoints import read_spec
    from dflash_eval.model.drafter import DFlashDrafter, apply_rope

    for top_level in (False, True):
        path = _with_partial_rotary(drafter_dirs["zlab"], tmp_path / f"prf{top_level}", top_level=top_level)
        spec = read_spec(path)[0]
        assert spec.rope["partial_rotary_factor"] == 0.5 and spec.head_dim == 16
        assert any("ignored: transformers' Qwen3 rotary rotates the whole head (16 dims); vLLM serves it rotating 8"
                   in n for n in spec.config_notes)
    served_spec = apply_semantics(spec, "vllm", "test")
    assert rotary_dim(spec.rope, 16, "zlab") == 16 and rotary_dim(spec.rope, 16, "vllm") == 8
    assert [n for n in served_spec.config_notes if n.startswith("partial")] == [
        "partial_rotary_factor 0.5: RoPE rotates the first 8 of 16 dims of each head, the rest pass unrotated "
        "(vLLM get_rope)"]
    positions = torch.arange(5)
    whole, served = DFlashDrafter(spec), DFlashDrafter(served_spec)
    cos, sin = whole._rope(torch.zeros(5, 16), positions)
    assert cos.shape == (5, 16)
    cos, sin = served._rope(torch.zeros(5, 16), positions)
    # vLLM get_rope: inv_freq = 1 / theta^(arange(0, rotary_dim, 2) / rotary_dim), neox halves within rotary_dim
    theta = spec.rope["rope_theta"]
    inv = 1.0 / (theta ** (torch.arange(0, 8, 2, dtype=torch.float) / 8))
    angles = positions[:, None].float() * inv
    assert cos.shape == (5, 8) and torch.allclose(cos, torch.cat((angles, angles), -1).cos())
    x = torch.randn(2, 5, 16)
    rotated = apply_rope(x, cos, sin)
    assert torch.equal(rotated[..., 8:], x[..., 8:])  # the rest passes unrotated
    half = x[..., :8]
    expected = half * cos + torch.cat((-half[..., 4:], half[..., :4]), -1) * sin
    assert torch.allclose(rotated[..., :8], expected)


def test_partial_rotary_with_another_rope_type_is_refused_by_name(drafter_dirs, tmp_path):
    path = _with_partial_rotary(drafter_dirs["zlab"], tmp_path / "yarn")
    config = json.loads((path / "config.json").read_text())
    config["rope_parameters"].update({"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 64})
    (path / "config.json").write_text(json.dumps(config))
    result = runner.invoke(app, ["inspect", str(path)])
    assert result.exit_code == 2
    assert "config key 'partial_rotary_factor'=0.5 with rope_type 'yarn' is not implemented" in result.output


def test_a_drafter_carrying_partial_rotary_scores_differently_when_served(trained, tmp_path):
    good = _with_partial_rotary(trained["qwen3"]["good"], tmp_path / "good-prf")
    target = trained["qwen3"]["target"]
    shown = runner.invoke(app, ["inspect", str(good), "--target", str(target)], env={"COLUMNS": "250"})
    assert "served differently by vLLM 0.33: partial_rotary_factor 0.5: vLLM rotates 8 of 16 dims" in shown.stdout
    taus = {}
    for rules in ("speculators", "vllm"):
        out = tmp_path / rules
        made = runner.invoke(app, ["run", "-d", str(good), "--target", str(target), "--out", str(out), "--cache-dir",
                                   str(tmp_path / "cache"), "--prompts", "demo", "--limit", "4", "--max-new-tokens",
                                   "40", "--semantics", rules])
        assert made.exit_code == 0, made.output
        taus[rules] = json.loads((out / "run.json").read_text())["drafters"][0]["metrics"]["tau_macro"]
    assert taus["vllm"] < taus["speculators"] - 1, taus  # measured: 1.01 against 3.90
    result = runner.invoke(app, ["doctor", "-d", str(good), "--target", str(target), "--max-new-tokens", "40",
                                 "--prompts", "demo", "--limit", "4", "--cache-dir", str(tmp_path / "cache"),
                                 "--out", str(tmp_path / "doc")], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    rows = {v["variant"]: v["tau_macro"] for v in json.loads((tmp_path / "doc" / "doctor.json").read_text())["variants"]}
    # both readings on the same trajectories: as trained (whole head) and the RoPE alone as vLLM serves it
    # (measured: 3.90 and 1.88; vLLM's rules in full, windows counted from the query too: 1.01)
    assert rows["RoPE as vLLM serves it (rotates 8 of 16 dims)"] < rows["as configured"] - 1, rows
    assert rows["vllm rules (--semantics vllm)"] < rows["as configured"] - 1, rows
    assert "RoPE as vLLM" in result.stdout
