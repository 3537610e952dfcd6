"""`served` on numbers no server can produce: refused, one line naming the file and the series, exit 2
(serving/counters/checks.py, one rule per invariant, applied by every reader). Hypothesis draws served dumps with the
invariants as properties: a dump built from real counts reads back exactly; breaking one invariant is
refused by name. Also /metrics read right: per-engine and summed views, the varied-draft-length warning,
diffusion dumps refused, SGLang's counters converted to our tau."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_served import vllm_dump
from typer.testing import CliRunner

from dflash_eval.cli import app
from dflash_eval.core.errors import InputError
from dflash_eval.serving.commands.served import read_served
from dflash_eval.serving.counters import counts as S

runner = CliRunner()
FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@st.composite
def real_counts(draw):
    """(drafts, draft_tokens, accepted, per_pos) of real steps: each draft of k tokens accepts a prefix."""
    k = draw(st.integers(1, 5))
    steps = draw(st.lists(st.integers(0, k), min_size=1, max_size=30))
    per_pos = [sum(n > i for n in steps) for i in range(k)]
    return len(steps), len(steps) * k, sum(steps), per_pos


def read(tmp_path, text, name="dump.txt"):
    path = tmp_path / name
    path.write_text(text)
    return read_served([path], None)


@FAST
@given(counts=real_counts())
def test_dumps_of_real_counts_read_back_exactly(tmp_path, counts):
    drafts, tokens, accepted, per_pos = counts
    s = S.summary(read(tmp_path, vllm_dump({("m", "0"): (drafts, tokens, accepted, per_pos)})))
    assert s["tau"] == 1 + accepted / drafts and s["counts"]["accepted_per_pos"] == per_pos
    assert not any("draft length varied" in n for n in s["notes"])


BREAKS = {
    "accepted above drafted": lambda d, t, a, p: (d, t, t + 1, p),
    "a position above the drafts": lambda d, t, a, p: (d, t, a, [d + 1, *p[1:]]),
    "drafted above drafts x k": lambda d, t, a, p: (d, d * len(p) + 1, a, p),
}
NAMED = {"accepted above drafted": "accepted tokens exceed the", "a position above the drafts":
         "position 0 has", "drafted above drafts x k": "drafted tokens in"}


@FAST
@given(counts=real_counts(), broken=st.sampled_from(sorted(BREAKS)))
def test_breaking_one_invariant_is_refused_by_name(tmp_path, counts, broken):
    values = BREAKS[broken](*counts)
    with pytest.raises(InputError) as refused:
        read(tmp_path, vllm_dump({("m", "0"): values}))
    message = refused.value.one_line()
    assert str(tmp_path / "dump.txt") in message and NAMED[broken] in message and 'engine="0"' in message


@FAST
@given(counts=real_counts(), other=st.integers(0, 1000))
def test_a_series_given_twice_must_carry_one_value(tmp_path, counts, other):
    dump = vllm_dump({("m", "0"): counts})
    line = next(x for x in dump.splitlines() if x.startswith("vllm:spec_decode_num_drafts_total"))
    doubled = dump + line.rsplit(" ", 1)[0] + f" {float(other)!r}\n"
    if other == counts[0]:  # the same value twice is the same series
        assert read(tmp_path, doubled).drafts == counts[0]
    else:
        with pytest.raises(InputError, match="vllm:spec_decode_num_drafts_total.* is given twice with different "
                                             "values"):
            read(tmp_path, doubled)


@pytest.mark.parametrize("text, named", [
    ("sglang:spec_accept_length{model_name=\"m\"} 0.3\n", "sglang:spec_accept_length is 0.3, not an acceptance length"),
    ("sglang:spec_accept_length{model_name=\"m\"} 0.0\n", "sglang:spec_accept_length is 0: no speculative step"),
    ("sglang:spec_accept_length{model_name=\"m\"} 2.0\nsglang:spec_accept_length{model_name=\"m\"} 3.0\n",
     "sglang:spec_accept_length{model_name=\"m\"} is given twice"),
    ("vllm:diffusion_num_denoising_steps_total{engine=\"0\",model_name=\"m\"} 10.0\n",
     "holds vllm:diffusion_num_denoising_steps_total: a diffusion (dLLM) server's denoising counters"),
])
def test_gauges_and_diffusion_dumps_are_refused_by_name(tmp_path, text, named):
    (tmp_path / "m.txt").write_text(text)
    result = runner.invoke(app, ["served", str(tmp_path / "m.txt")])
    assert result.exit_code == 2 and named in result.output and "m.txt" in result.output, result.output


@pytest.mark.parametrize("edit, named", [
    ({"spec_decode_per_position_acceptance_rates": [1.5, 0.2]},
     "spec_decode_per_position_acceptance_rates[0] is 1.5, not a rate in [0, 1]"),
    ({"spec_decode_accepted_tokens": 999}, "the bench result: 999 accepted tokens exceed the 20 drafted tokens"),
    ({"spec_decode_acceptance_length": 0.5}, "spec_decode_acceptance_length is 0.5, not an acceptance length"),
])
def test_bench_results_with_impossible_numbers_are_refused(tmp_path, edit, named):
    result = {"spec_decode_num_drafts": 10, "spec_decode_draft_tokens": 20, "spec_decode_accepted_tokens": 8,
              "spec_decode_per_position_acceptance_rates": [0.5, 0.3], "model_id": "m", **edit}
    (tmp_path / "bench.json").write_text(json.dumps(result))
    shown = runner.invoke(app, ["served", str(tmp_path / "bench.json")])
    assert shown.exit_code == 2 and named in shown.output and "bench.json" in shown.output, shown.output


def test_engines_are_shown_one_by_one_beside_the_pooled_view(tmp_path):
    dump = vllm_dump({("a", "0"): (10, 30, 12, [6, 4, 2]), ("a", "1"): (10, 30, 18, [8, 6, 4]),
                      ("b", "0"): (10, 30, 30, [10, 10, 10])})
    (tmp_path / "d.txt").write_text(dump)
    data = json.loads(runner.invoke(app, ["served", str(tmp_path / "d.txt"), "--model", "a", "--json"]).stdout)
    assert data["tau"] == pytest.approx(1 + 30 / 20)
    assert [(e["series"], e["tau"]) for e in data["served"]["per_engine"]] == [('{engine="0"}', 1 + 12 / 10),
                                                                             ('{engine="1"}', 1 + 18 / 10)]
    # vllm bench serve sums every label set, other models included: 60 accepted in 30 drafts
    assert any("summed over all 2 models, as `vllm bench serve` sums every label set: tau 3.000" in n
               for n in data["served"]["notes"])


def test_a_varied_draft_length_is_warned_about(tmp_path):
    # 10 drafts, 24 drafted tokens: not 10 x 3 (dynamic speculation or grammar-invalidated drafts)
    (tmp_path / "d.txt").write_text(vllm_dump({("m", "0"): (10, 24, 8, [5, 2, 1])}))
    data = json.loads(runner.invoke(app, ["served", str(tmp_path / "d.txt"), "--json"]).stdout)
    assert any(n.startswith("the draft length varied: 24 drafted tokens in 10 drafts is not 10 x k = 30")
               for n in data["served"]["notes"])
    assert data["served"]["accept_length_histogram"] is None


SGLANG_COUNTERS = """\
# HELP sglang:generation_tokens_total Number of generation tokens processed.
# TYPE sglang:generation_tokens_total counter
sglang:generation_tokens_total{{is_streaming="false",model_name="m"}} {gen_a}
sglang:generation_tokens_total{{is_streaming="true",model_name="m"}} {gen_b}
# HELP sglang:spec_verify_calls_total Number of speculative decoding verification calls.
# TYPE sglang:spec_verify_calls_total counter
sglang:spec_verify_calls_total{{model_name="m"}} {verify}
# HELP sglang:num_requests_total The number of processed requests.
# TYPE sglang:num_requests_total counter
sglang:num_requests_total{{is_streaming="false",model_name="m"}} {req_a}
sglang:num_requests_total{{is_streaming="true",model_name="m"}} {req_b}
"""


def test_sglangs_counters_give_a_windowed_tau_without_the_prefill_token(tmp_path):
    # window: 3 requests, 20 verify steps, 63 completion tokens = 3 (prefill) + 20 (bonus) + 40 accepted
    before = SGLANG_COUNTERS.format(gen_a=100.0, gen_b=0.0, verify=30.0, req_a=5.0, req_b=0.0)
    after = SGLANG_COUNTERS.format(gen_a=150.0, gen_b=13.0, verify=50.0, req_a=7.0, req_b=1.0)
    (tmp_path / "b.txt").write_text(before)
    (tmp_path / "a.txt").write_text(after)
    data = json.loads(runner.invoke(app, ["served", str(tmp_path / "b.txt"), str(tmp_path / "a.txt"), "--json"]).stdout)
    assert data["tau"] == pytest.approx(1 + 40 / 20)  # SGLang's own: 63 / 20 = 3.15 counts the prefill token
    assert data["served"]["counts"] == {"drafts": 20, "draft_tokens": None, "accepted": 40, "accepted_per_pos": None}
    assert "SGLang 0.5.23 srt/observability/metrics_collector.py" in data["served"]["reference"]
    one = json.loads(runner.invoke(app, ["served", str(tmp_path / "a.txt"), "--json"]).stdout)
    assert one["tau"] == pytest.approx((163 - 8) / 50)  # lifetime: (generation tokens - requests) / verify steps
    reset = runner.invoke(app, ["served", str(tmp_path / "a.txt"), str(tmp_path / "b.txt")])
    assert reset.exit_code == 2 and "counter reset between the dumps: sglang:generation_tokens_total" in reset.output
    (tmp_path / "x.txt").write_text(SGLANG_COUNTERS.format(gen_a=10.0, gen_b=0.0, verify=20.0, req_a=5.0, req_b=0.0))
    bad = runner.invoke(app, ["served", str(tmp_path / "x.txt")])
    assert bad.exit_code == 2 and "10 generation tokens for 5 requests and 20 verify steps" in bad.output


@pytest.mark.parametrize("counts, named", [
    # vLLM counts position i only when every position before it was accepted: 700 after 650 is no real count
    ((1000, 3000, 1450, [650, 700, 100]), "position 1 has 700 accepted tokens, more than the 650 of position 0"),
    # fewer drafted tokens than drafts gave tau 1.000 (every draft holds one token at least)
    ((10 ** 12, 300, 290, [200, 60, 30]), "300 drafted tokens in 1000000000000 drafts"),
])
def test_counts_a_vllm_server_cannot_produce_are_refused(tmp_path, counts, named):
    """Issue 49 D: per-position counts that rise, fewer drafted tokens than drafts."""
    (tmp_path / "d.txt").write_text(vllm_dump({("m", "0"): counts}))
    result = runner.invoke(app, ["served", str(tmp_path / "d.txt")])
    assert result.exit_code == 2 and named in result.output and "d.txt" in result.output, result.output


def test_sglang_counters_print_no_python_none_and_say_the_gauge_beside_them(tmp_path):
    """Issue 49 K: `served` printed "290 accepted of None drafted tokens" for SGLang's counters, and dropped
    a gauge of the same dump in silence; a gauge no run can give beside them is refused by name."""
    counters = SGLANG_COUNTERS.format(gen_a=330.0, gen_b=0.0, verify=30.0, req_a=10.0, req_b=0.0)
    (tmp_path / "c.txt").write_text(counters)
    shown = runner.invoke(app, ["served", str(tmp_path / "c.txt")], env={"COLUMNS": "300"})
    assert shown.exit_code == 0 and "None" not in shown.output, shown.output
    assert "290 accepted drafts in 30 verify steps" in shown.output
    (tmp_path / "g.txt").write_text(counters + 'sglang:spec_accept_length{model_name="m"} 7.5\n')
    data = json.loads(runner.invoke(app, ["served", str(tmp_path / "g.txt"), "--json"]).stdout)
    assert data["tau"] == pytest.approx(1 + 290 / 30)
    assert any(n.startswith("sglang:spec_accept_length = 7.5 (the gauge") and "they differ" in n
               for n in data["served"]["notes"])
    (tmp_path / "bad.txt").write_text(counters + 'sglang:spec_accept_length{model_name="m"} 0.4\n')
    bad = runner.invoke(app, ["served", str(tmp_path / "bad.txt")])
    assert bad.exit_code == 2 and "sglang:spec_accept_length (beside the counters) is 0.4" in bad.output, bad.output
