"""Tap capture: forward hooks give exactly "the output of layer t" on every tiny target."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM

from dflash_eval.core.errors import InputError
from dflash_eval.model.kernels import OPERATIONS, kernel_report
from dflash_eval.model.target import capture_taps, load_target, target_info

# transformers' internals: also run on the oldest supported transformers (scripts/compat.sh)
pytestmark = pytest.mark.compat

KINDS = ["qwen3", "qwen3_5", "qwen3_5_text", "qwen3_next"]


@pytest.mark.parametrize("kind", KINDS)
def test_hooked_taps_equal_hf_hidden_states_and_last_layer_is_pre_norm(test_bed, kind):
    target = load_target(str(test_bed[kind]), device="cpu", dtype="auto")
    assert target.dtype == torch.float32  # auto = fp32 on CPU
    L = target.info.num_layers
    ids = torch.tensor(target.tokenizer("class Stack:\n    def push(self, x):\n")["input_ids"])
    capture = capture_taps(target, ids, list(range(L)))
    with torch.inference_mode():
        out = target.model(input_ids=ids[None], output_hidden_states=True)
    H = target.info.hidden_size
    per_layer = capture.taps.view(len(ids), L, H)
    for t in range(L - 1):
        assert torch.equal(per_layer[:, t], out.hidden_states[t + 1][0]), f"layer {t}"
    # HF's last entry is post final norm; our last tap is the raw output of the last layer
    assert not torch.allclose(per_layer[:, L - 1], out.hidden_states[L][0])
    final_norm = target.model.model.norm
    torch.testing.assert_close(final_norm(per_layer[:, L - 1]), out.hidden_states[L][0])
    assert torch.equal(capture.greedy, out.logits[0].argmax(-1))
    assert target.tap_passes == 1


def test_taps_come_back_in_the_order_asked(test_bed):
    target = load_target(str(test_bed["qwen3"]), device="cpu")
    ids = torch.tensor(target.tokenizer("x = 1\n")["input_ids"])
    H = target.info.hidden_size
    forward = capture_taps(target, ids, [1, 3]).taps
    backward = capture_taps(target, ids, [3, 1]).taps
    assert torch.equal(forward[:, :H], backward[:, H:])


@pytest.mark.parametrize("kind,hybrid", [("qwen3", False), ("qwen3_5", True), ("qwen3_5_text", True), ("qwen3_next", True)])
def test_kernel_report_names_the_function_that_ran_per_gated_deltanet_layer(test_bed, kind, hybrid):
    """The probe forward (a prefill and one decode step) reaches every operation of every Gated-DeltaNet layer;
    with no fla on this machine, each ran transformers' torch implementation, once per forward that needs it."""
    model = AutoModelForCausalLM.from_pretrained(test_bed[kind])
    report = kernel_report(model)
    assert bool(report) == hybrid
    if hybrid:
        types = model.config.get_text_config().layer_types
        assert {k.layer for k in report} == {i for i, kind_ in enumerate(types) if kind_ == "linear_attention"}
        for k in report:
            assert not k.accelerated and k.calls >= 1, k
            assert k.function.startswith("transformers.models.") and k.function.endswith("." + OPERATIONS[k.operation])
        assert kernel_report(model) is report  # remembered while the binding stays


def test_target_info_reads_vlm_wrapper_text_config(test_bed):
    info = target_info(test_bed["qwen3_5"])
    assert info.num_layers == 6 and info.hidden_size == 64


def test_missing_target_is_one_clear_error(tmp_path):
    with pytest.raises(InputError, match="no such file or directory|not found in the Hugging Face cache"):
        load_target(str(tmp_path / "nope"))


# transformers >= 5.25 sends an operation to fla only for inputs on the devices it lists; a stand-in that plays
# fla on a machine where the CPU stands for the accelerator adds "cpu" there when transformers imports it
ROUTE_CPU_TO_FLA = """
import sys
hub = sys.modules.get("transformers.integrations.hub_kernels")
if hub is not None and hasattr(hub, "_PACKAGE_SUPPORTED_DEVICES"):
    hub._PACKAGE_SUPPORTED_DEVICES["fla"] = (*hub._PACKAGE_SUPPORTED_DEVICES.get("fla", ()), "cpu")
"""


def test_cpu_run_with_fla_kernels_bound_is_refused_before_it_crashes(test_bed, tmp_path):
    """fla cannot be installed on a CPU machine, so a stand-in package with fla's import path and
    function names plays it (its kernels raise, as triton's do without CUDA), routed to as transformers
    routes the real one on a GPU. The probe reaches it (and catches the crash); load_target must refuse,
    naming the function, and the switch to the torch fallback must make a CPU forward work."""
    import subprocess
    import sys
    import textwrap

    package = tmp_path / "fla" / "ops" / "gated_delta_rule"
    package.mkdir(parents=True)
    (tmp_path / "fla" / "__init__.py").write_text(ROUTE_CPU_TO_FLA)
    (tmp_path / "fla" / "ops" / "__init__.py").write_text("")
    (package / "__init__.py").write_text(textwrap.dedent("""
        def chunk_gated_delta_rule(*args, **kwargs):
            raise RuntimeError("triton kernel launched without CUDA")
        def fused_recurrent_gated_delta_rule(*args, **kwargs):
            raise RuntimeError("triton kernel launched without CUDA")
    """))
    script = textwrap.dedent(f"""
        import sys
        import torch
        from transformers import AutoModelForCausalLM
        from dflash_eval.core.errors import InputError
        from dflash_eval.model.kernels import kernel_report, torch_fallback_kernels
        from dflash_eval.model.target import load_target
        # the override routes every operation back to the torch fallback, so a CPU forward works
        model = AutoModelForCausalLM.from_pretrained({str(test_bed["qwen3_5_text"])!r})
        assert kernel_report(model)[0].accelerated
        with torch_fallback_kernels(model):
            assert not any(k.accelerated for k in kernel_report(model))
            model(torch.tensor([[1, 2, 3, 4]]))
        assert kernel_report(model)[0].accelerated
        try:
            model(torch.tensor([[1, 2, 3, 4]]))
        except RuntimeError as exc:
            assert "triton kernel launched without CUDA" in str(exc)
        else:
            raise AssertionError("the stand-in fla was not called")
        try:
            load_target({str(test_bed["qwen3_5_text"])!r}, device="cpu")
        except InputError as exc:
            print(exc.one_line()); sys.exit(2)
        sys.exit(0)
    """)
    env = {**__import__("os").environ, "PYTHONPATH": f"{tmp_path}:{__import__('os').environ.get('PYTHONPATH', '')}"}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "fla.ops.gated_delta_rule.chunk_gated_delta_rule" in done.stdout
    assert "needs CUDA" in done.stdout and "Traceback" not in done.stdout + done.stderr


@pytest.mark.parametrize("kind", ["qwen3", "qwen3_5_text"])
def test_chunked_tap_pass_matches_one_forward(test_bed, kind):
    """Long sequences run as a chunked prefill with the cache; the taps and greedy tokens stay the same."""
    target = load_target(str(test_bed[kind]), device="cpu")
    ids = torch.tensor(target.tokenizer("def add(a, b):\n    return a + b\n" * 6)["input_ids"])
    whole = capture_taps(target, ids, [1, 5])
    chunked = capture_taps(target, ids, [1, 5], sequence_chunk=17)
    torch.testing.assert_close(chunked.taps, whole.taps, rtol=1e-4, atol=1e-4)
    assert torch.equal(chunked.greedy, whole.greedy)
    assert target.tap_passes == 2  # a chunked pass is still one pass


def test_cpu_runs_do_not_advise_installing_flash_linear_attention():
    """On CPU the Gated-DeltaNet torch fallback is the right kernel; transformers' advice to install fla (which
    would make a CPU run crash) is dropped. The check runs in a fresh process: the warning is emitted once."""
    import os
    import subprocess
    import sys

    script = (
        "import torch\n"
        "from dflash_eval import demo\n"
        "from dflash_eval.model.target import load_target\n"
        "target = load_target(str(demo.target_path()), device='cpu', dtype='float32')\n"
        "target.model(input_ids=torch.tensor([[1, 2, 3, 4, 5]]))\n"
        "print('forward ok')\n"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    env.pop("TRANSFORMERS_VERBOSITY", None)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "forward ok" in done.stdout
    assert "falling back to its reference PyTorch implementation" not in done.stderr


def test_kernels_torch_is_refused_by_name_where_a_wrapper_hides_the_torch_implementation(test_bed, monkeypatch):
    """A future transformers that wraps an operation so that its torch implementation cannot be reached: the
    switch is refused in one line naming the operation, the wrapper and transformers' version, and nothing
    is left swapped."""
    import sys as _sys

    from dflash_eval.model.kernels import OPERATIONS, fallback_routes, torch_fallback_kernels, transformers_version

    model = AutoModelForCausalLM.from_pretrained(test_bed["qwen3_5_text"])
    module = _sys.modules[type(model.model.layers[0].linear_attn).__module__]
    registry = {"chunk": getattr(module, OPERATIONS["chunk_gated_delta_rule"])}

    class Opaque:  # reaches the real operation through a table the search cannot see
        def __call__(self, *args, **kwargs):
            return registry["chunk"](*args, **kwargs)

    monkeypatch.setattr(module, OPERATIONS["chunk_gated_delta_rule"], Opaque())
    with pytest.raises(InputError, match=rf"--kernels torch: transformers {transformers_version()} binds the "
                                         r"Gated-DeltaNet operation chunk_gated_delta_rule as a .*Opaque"):
        fallback_routes(model)
    bound = {name: getattr(module, name) for name in OPERATIONS.values()}
    with pytest.raises(InputError):
        with torch_fallback_kernels(model):
            pass
    assert {name: getattr(module, name) for name in OPERATIONS.values()} == bound
