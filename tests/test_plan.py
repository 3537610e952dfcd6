"""`dflash-eval plan` and its roofline model (core/roofline.py).

Sizes are checked against transformers itself: the public shapes of Qwen3-8B, Qwen3.6-27B (hybrid, as the
text config and as the released `qwen3_5` VLM wrapper) and Qwen3.5-35B-A3B (MoE, wrapper and text config)
instantiated on the meta device (exact parameter counts, no tolerance needed); cache bytes against the
`nbytes` of the real cache of the tiny test-bed targets after a forward; drafters against the tensors in
their real safetensors files. FLOPs, bytes and step times on hand-computed cases. Configs are written into
tmp_path; nothing is downloaded.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from dflash_eval.cli import app
from dflash_eval.core import roofline as R
from dflash_eval.core.errors import InputError

runner = CliRunner()

QWEN3_8B = {  # Qwen/Qwen3-8B config.json
    "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "attention_bias": False, "head_dim": 128,
    "hidden_size": 4096, "intermediate_size": 12288, "max_position_embeddings": 40960, "num_attention_heads": 32,
    "num_hidden_layers": 36, "num_key_value_heads": 8, "rms_norm_eps": 1e-6, "rope_theta": 1000000,
    "tie_word_embeddings": False, "vocab_size": 151936, "torch_dtype": "bfloat16"}
HYBRID_TYPES = ["linear_attention"] * 3 + ["full_attention"]
QWEN36_27B_TEXT = {  # text_config of Qwen/Qwen3.6-27B (the Qwen3.5-27B shape: 48 Gated-DeltaNet + 16 gated attention)
    "model_type": "qwen3_5_text", "attention_bias": False, "attn_output_gate": True, "head_dim": 256,
    "hidden_size": 5120, "intermediate_size": 17408, "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128,
    "linear_num_key_heads": 16, "linear_num_value_heads": 48, "linear_value_head_dim": 128,
    "max_position_embeddings": 262144, "mtp_num_hidden_layers": 1, "num_attention_heads": 24,
    "num_hidden_layers": 64, "num_key_value_heads": 4, "rms_norm_eps": 1e-6, "tie_word_embeddings": False,
    "vocab_size": 248320, "layer_types": HYBRID_TYPES * 16, "mamba_ssm_dtype": "float32",
    "rope_parameters": {"rope_type": "default", "rope_theta": 10000000, "partial_rotary_factor": 0.25,
                        "mrope_section": [11, 11, 10], "mrope_interleaved": True}}
VISION_27B = {"model_type": "qwen3_5", "depth": 27, "hidden_size": 1152, "intermediate_size": 4304, "num_heads": 16,
              "out_hidden_size": 5120, "patch_size": 16, "spatial_merge_size": 2, "temporal_patch_size": 2,
              "num_position_embeddings": 2304, "in_channels": 3, "hidden_act": "gelu_pytorch_tanh"}
QWEN36_27B = {"architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5",
              "tie_word_embeddings": False, "text_config": QWEN36_27B_TEXT, "vision_config": VISION_27B}
QWEN35_35B_A3B_TEXT = {  # text_config of Qwen/Qwen3.5-35B-A3B
    "model_type": "qwen3_5_moe_text", "hidden_size": 2048, "num_hidden_layers": 40, "layer_types": HYBRID_TYPES * 10,
    "linear_num_key_heads": 16, "linear_num_value_heads": 32, "linear_key_head_dim": 128, "linear_value_head_dim": 128,
    "linear_conv_kernel_dim": 4, "head_dim": 256, "num_attention_heads": 16, "num_key_value_heads": 2,
    "attn_output_gate": True, "num_experts": 256, "num_experts_per_tok": 8, "moe_intermediate_size": 512,
    "shared_expert_intermediate_size": 512, "tie_word_embeddings": False, "vocab_size": 248320, "rms_norm_eps": 1e-6,
    "max_position_embeddings": 262144}
QWEN35_35B_A3B = {"architectures": ["Qwen3_5MoeForConditionalGeneration"], "model_type": "qwen3_5_moe",
                  "tie_word_embeddings": False, "text_config": QWEN35_35B_A3B_TEXT,
                  "vision_config": {**VISION_27B, "model_type": "qwen3_5_moe", "out_hidden_size": 2048}}
PUBLIC = {"qwen3-8b": QWEN3_8B, "qwen3.6-27b": QWEN36_27B, "qwen3.6-27b-text": QWEN36_27B_TEXT,
          "qwen3.5-35b-a3b": QWEN35_35B_A3B, "qwen3.5-35b-a3b-text": QWEN35_35B_A3B_TEXT}


def zlab_drafter(hidden, intermediate, taps, mask, vocab, num_target_layers) -> dict:
    """A z-lab DFlash config (the Qwen3-8B-DFlash-b16 layout: 5 layers, 32 heads, 8 kv heads, head_dim 128)."""
    return {"architectures": ["DFlashDraftModel"], "model_type": "qwen3", "hidden_size": hidden,
            "intermediate_size": intermediate, "num_hidden_layers": 5, "num_attention_heads": 32,
            "num_key_value_heads": 8, "head_dim": 128, "vocab_size": vocab, "rms_norm_eps": 1e-6,
            "max_position_embeddings": 40960, "rope_theta": 1000000, "tie_word_embeddings": False,
            "num_target_layers": num_target_layers,
            "dflash_config": {"mask_token_id": mask, "target_layer_ids": taps, "block_size": 16}}


DRAFTERS = {"qwen3-8b": zlab_drafter(4096, 12288, [1, 9, 17, 25, 33], 151669, 151936, 36),
            "qwen3.6-27b": zlab_drafter(5120, 17408, [1, 16, 31, 46, 61], 248070, 248320, 64),
            "qwen3.5-35b-a3b": zlab_drafter(2048, 6144, [1, 10, 19, 28, 37], 248070, 248320, 40)}


def write(folder: Path, config: dict) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def meta_parameters(folder: Path) -> int:
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(folder, local_files_only=True)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return sum(p.numel() for p in model.parameters())  # tied tables counted once, like roofline.parameters


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_parameters_equal_the_model_transformers_instantiates_on_the_meta_device(name, tmp_path):
    folder = write(tmp_path / name, PUBLIC[name])
    assert R.parameters(R.model_shape(PUBLIC[name])) == meta_parameters(folder)  # exact: every tensor counted


def test_public_shapes_known_figures():
    eight, hybrid, moe = (R.model_shape(PUBLIC[k]) for k in ("qwen3-8b", "qwen3.6-27b", "qwen3.5-35b-a3b"))
    assert R.parameters(eight) == 8_190_735_360  # "8.2B" on the model card
    assert R.weight_bytes(hybrid) == 2 * R.parameters(hybrid)
    assert (hybrid.attention_layers, hybrid.linear_layers) == (16, 48)
    # 16 attention layers x 2 x 4 kv heads x 256 x 2 bytes; 48 x (conv 10240 x 4 x 2 + recurrent 48 x 128 x 128 x 4)
    assert R.kv_bytes_per_token(hybrid) == 65_536
    assert R.state_bytes_per_sequence(hybrid) == 48 * (10240 * 4 * 2 + 48 * 128 * 128 * 4) == 154_927_104
    assert R.kv_bytes_per_token(eight) == 36 * 2 * 8 * 128 * 2 and R.state_bytes_per_sequence(eight) == 0
    assert (moe.num_experts, moe.experts_per_token) == (256, 8)
    active = R.matmul_parameters_per_token(moe) + moe.vocab_size * moe.hidden_size  # + lm_head
    assert 2.5e9 < active < 3.5e9  # "A3B": about 3B active parameters


@pytest.mark.compat
@pytest.mark.parametrize("kind", ["qwen3", "qwen3_5", "qwen3_5_text", "qwen3_next"])
def test_test_bed_targets_parameters_and_cache_bytes_are_exact(kind, test_bed):
    """The real model's parameters and the real cache's nbytes after a forward, fp32 and bf16."""
    from transformers import AutoModelForCausalLM

    from dflash_eval.pipeline.continuations import cache_fixed_bytes

    config = json.loads((test_bed[kind] / "config.json").read_text())
    shape = R.model_shape(config)
    model = AutoModelForCausalLM.from_pretrained(test_bed[kind], local_files_only=True, dtype=torch.float32)
    assert R.parameters(shape) == sum(p.numel() for p in model.parameters())
    for dtype in (torch.float32, torch.bfloat16):
        model = model.to(dtype)
        with torch.inference_mode():
            cache = model(input_ids=torch.randint(0, 100, (3, 7)), use_cache=True).past_key_values
        held = sum(t.nbytes for layer in cache.layers for v in vars(layer).values()
                   for t in (v.values() if isinstance(v, dict) else [v]) if isinstance(t, torch.Tensor))
        fixed = cache_fixed_bytes(model.config)  # transformers' per-layer token counter, once per cache
        assert held == R.cache_bytes(shape, 7, batch=3, dtype_bytes=torch.finfo(dtype).bits // 8) + fixed


def test_drafter_parameters_equal_the_tensors_in_their_checkpoints(drafter_dirs):
    from dflash_eval.formats.checkpoints import read_spec
    from dflash_eval.formats.files import read_safetensors_header

    for name, folder in drafter_dirs.items():
        stored = sum(math.prod(t.shape) for key, t in read_safetensors_header(folder / "model.safetensors").items() if key != "d2t")
        config = json.loads((folder / "config.json").read_text())
        assert R.parameters(R.drafter_shape(config)) == stored, name  # the format's convention holds here
        assert R.parameters(R.drafter_shape_from_spec(read_spec(folder)[0])) == stored, name


TINY = {"model_type": "qwen3", "vocab_size": 10, "hidden_size": 4, "num_hidden_layers": 1, "num_attention_heads": 2,
        "num_key_value_heads": 1, "head_dim": 2, "intermediate_size": 8}


def test_hand_computed_dense_forward():
    s = R.model_shape(TINY)
    # embedding 40, q 16 + k 8 + v 8 + o 16 + q/k norms 4, MLP 3 x 4 x 8 = 96, two norms 8, final norm 4, lm_head 40
    assert R.parameters(s) == 40 + 52 + 96 + 8 + 4 + 40 == 240
    assert R.matmul_parameters_per_token(s) == 48 + 96
    # one new token after 3 cached ones: 2 x 144 + attention 4 x 2 heads x 2 x (3 + 1) keys + lm_head 2 x 4 x 10
    assert R.forward_flops(s, 1, 1, 3) == 288 + 64 + 80 == 432
    # weights but the tables (160) + lm_head (40), x 2 bytes; keys/values 8 bytes x 4 tokens; logits 10 x 2
    assert R.forward_bytes(s, 1, 1, 3) == 400 + 32 + 20 == 452
    device = R.Accelerator("test", peak_flops=1000.0, bandwidth=100.0, memory_bytes=1)
    assert R.step_time(s, device, 1, 1, 3) == pytest.approx(4.52)  # memory-bound: 452 / 100 > 432 / 1000
    # a prefill of 4 tokens computing the last position's logits only: causal keys 1 + 2 + 3 + 4 = 10
    assert R.forward_flops(s, 2, 4, 0, logit_positions=1) == 2 * (4 * 288 + 16 * 10 + 80)
    fast_memory = R.Accelerator("test", peak_flops=1000.0, bandwidth=1e6, memory_bytes=1)
    assert R.step_time(s, fast_memory, 1, 1, 3) == pytest.approx(0.432)  # compute-bound


def test_hand_computed_moe_and_drafter():
    s = R.model_shape({**QWEN35_35B_A3B_TEXT, "num_experts": 4, "num_experts_per_tok": 2})
    assert R.experts_touched(s, 1) == 2  # 4 x (1 - (1 - 2/4)^1)
    assert R.experts_touched(s, 2) == 3  # 4 x (1 - 1/4)
    d = R.drafter_shape({**TINY, "dflash_config": {"target_layer_ids": [0, 1], "block_size": 2, "mask_token_id": 0}})
    # fc 2 x 4 x 4 = 32, hidden_norm and norm 8, the layer 52 + 96 + 8; tables are the target's (z-lab)
    assert R.parameters(d) == 32 + 8 + 156
    # per slot: 2 x 144 + attention 4 x 2 x 2 x (3 visible + 2 block) + lm_head 2 x 4 x 10; context: 2 x 4 x (8 + 4)
    assert R.drafter_flops(d, 1, 3) == 2 * (288 + 80 + 80)
    assert R.drafter_context_flops(d, 3) == 3 * 2 * 4 * (2 * 4 + 1 * 2 * 1 * 2)
    spec = R.drafter_shape({"speculators_model_type": "dflash", "transformer_layer_config": TINY, "block_size": 2,
                            "aux_hidden_state_layer_ids": [1, 2], "draft_vocab_size": 6})
    assert R.parameters(spec) - R.parameters(d) == 10 * 4 + 6 * 4  # the embedding and reduced lm_head copies


def test_unknown_shapes_are_refused_by_name():
    with pytest.raises(InputError, match="model_type'='llama'"):
        R.model_shape({**TINY, "model_type": "llama"})
    with pytest.raises(InputError, match="num_hidden_layers' is missing"):
        R.model_shape({k: v for k, v in TINY.items() if k != "num_hidden_layers"})
    with pytest.raises(InputError, match="--accelerator 'tpu'"):
        R.accelerator("tpu")


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("plan")
    out = {name: write(root / "targets" / name, PUBLIC[name]) for name in ("qwen3-8b", "qwen3.6-27b", "qwen3.5-35b-a3b")}
    out.update({f"{name}-dflash": write(root / "drafters" / name, config) for name, config in DRAFTERS.items()})
    return out


def plan_json(*args: str) -> tuple[int, dict]:
    result = runner.invoke(app, ["plan", *args, "--json"])
    assert result.exit_code in (0, 1), result.output
    return result.exit_code, json.loads(result.stdout)


def test_cli_json_document(folders, tmp_path):
    code, doc = plan_json("--target", str(folders["qwen3-8b"]), "--drafter", str(folders["qwen3-8b-dflash"]),
                          "--prompts", "humaneval", "--max-new-tokens", "2048", "--accelerator", "h200")
    assert code == 0 and doc["fits"] is True and doc["fix"] is None
    assert doc["target"]["parameters"] == meta_parameters(folders["qwen3-8b"])
    assert doc["target"]["weight_bytes"] == 2 * doc["target"]["parameters"]
    assert doc["drafters"][0]["parameters"] == R.parameters(R.drafter_shape(DRAFTERS["qwen3-8b"]))
    phases = {p["name"]: p for p in doc["phases"]}
    assert list(phases) == ["weights", "generate", "taps", "drafter pass"]
    assert phases["weights"]["memory_bytes"] == doc["target"]["weight_bytes"] + 2 * doc["drafters"][0]["parameters"]
    for name in ("generate", "taps", "drafter pass"):
        assert phases[name]["memory_bytes"] > phases["weights"]["memory_bytes"] and phases[name]["flops"] > 0
        assert phases[name]["seconds"] >= phases[name]["flops"] / R.ACCELERATORS["h200"].peak_flops * (1 - 1e-9)
    assert doc["prompts"]["sequences"] == 164 and doc["prompts"]["length_source"].startswith("ASSUMED")
    assert doc["batches"]["generation"] == 64
    # the drafter pass: every anchor of every prompt, B = 16 slots, lm_head over the 151,936-token vocabulary
    slots = sum(n - 1 for n in [2048] * 164) * 16
    assert phases["drafter pass"]["flops"] > slots * 2 * 4096 * 151936
    text = runner.invoke(app, ["plan", "--target", str(folders["qwen3-8b"]), "--drafter",
                               str(folders["qwen3-8b-dflash"]), "--prompts", "demo"], env={"COLUMNS": "200"})
    assert text.exit_code == 0 and "fits" in text.output and "drafter pass" in text.output


def test_prompt_lengths_come_from_the_tokenizer_when_the_target_has_one(folders, test_bed, tmp_path):
    from transformers import AutoTokenizer

    from dflash_eval.pipeline.prompts import load_prompts, prompt_ids

    target = shutil.copytree(folders["qwen3-8b"], tmp_path / "with-tokenizer")
    for f in test_bed["qwen3"].iterdir():
        if f.name.startswith(("tokenizer", "chat_template", "special_tokens")):
            shutil.copy(f, target / f.name)
    _, doc = plan_json("--target", str(target), "--drafter", str(folders["qwen3-8b-dflash"]), "--prompts", "demo")
    tokenizer = AutoTokenizer.from_pretrained(target, local_files_only=True)
    lengths = [len(prompt_ids(tokenizer, p, False)) for p in load_prompts("demo")]
    assert doc["prompts"]["length_source"].startswith("the target's tokenizer")
    assert (doc["prompts"]["min_tokens"], doc["prompts"]["max_tokens"]) == (min(lengths), max(lengths))


def test_does_not_fit_names_the_option_that_fits(folders):
    """A chosen batch that overflows the accelerator is caught before any GPU is leased, the plan names the
    largest value that fits, and with it the plan fits (one above it does not)."""
    moe = ["--target", str(folders["qwen3.5-35b-a3b"]), "--drafter", str(folders["qwen3.5-35b-a3b-dflash"]),
           "--prompts", "humaneval", "--max-new-tokens", "2048", "--accelerator", "a100"]
    code, doc = plan_json(*moe, "--anchor-batch", "1024")  # 1024 x 16 slots of 248,320 logits: ~8 GB, and scores
    assert code == 1 and doc["fits"] is False and doc["fix"].startswith("--anchor-batch ")
    over = {p["name"] for p in doc["phases"] if p["memory_bytes"] > doc["usable_bytes"]}
    assert over == {"drafter pass"}
    fixed = int(doc["fix"].split()[-1])
    assert plan_json(*moe, "--anchor-batch", str(fixed))[1]["fits"] is True
    assert plan_json(*moe, "--anchor-batch", str(2 * fixed))[1]["fits"] is False  # halving found the largest power
    dense = ["--target", str(folders["qwen3.6-27b"]), "--drafter", str(folders["qwen3.6-27b-dflash"]),
             "--prompts", "humaneval", "--max-new-tokens", "4096", "--accelerator", "h100"]
    code, doc = plan_json(*dense, "--generation-batch", "64")
    assert code == 1 and doc["fix"].startswith("--generation-batch ")
    batch = int(doc["fix"].split()[-1])
    assert plan_json(*dense, "--generation-batch", str(batch))[1]["fits"] is True
    assert plan_json(*dense, "--generation-batch", str(batch + 1))[1]["fits"] is False
    code, auto = plan_json(*dense)  # the run's own rule picks a batch that fits
    assert code == 0 and auto["batches"]["generation"] <= batch


def test_doctor_keeps_its_trajectories_in_host_memory(folders):
    """doctor on the 27B hybrid, HumanEval x 2048: 18 layers of every trajectory wait in host memory, and
    one context variant's 5 taps at a time (80.8 GiB, pageable: no power-of-two rounding), not on the H200;
    plan compares the figure with this machine's memory (`host`)."""
    args = ["--target", str(folders["qwen3.6-27b"]), "--drafter", str(folders["qwen3.6-27b-dflash"]),
            "--prompts", "humaneval", "--max-new-tokens", "2048"]
    _, run = plan_json(*args)
    code, doc = plan_json(*args, "--doctor")
    doctor = doc["phases"][-1]
    assert code == 0 and doc["fits"] and doctor["name"] == "doctor"
    tokens = doc["prompts"]["mean_tokens"] * 164 + 164 * 2048
    assert doctor["host_bytes"] == pytest.approx(tokens * (18 + 5) * 5120 * 2, rel=1e-9)  # base 18, a context's 5
    assert 80 * R.GIB < doctor["host_bytes"] < 81 * R.GIB  # it was 126.5 GiB, ~184 GiB once pinned blocks rounded up
    host = doc["host"]
    assert host["doctor_bytes"] == doctor["host_bytes"] and host["machine_total_bytes"] > 0
    assert host["fits"] == (host["doctor_bytes"] <= host["machine_available_bytes"])
    assert (host["fix"] is None) == host["fits"]
    assert doctor["memory_bytes"] < run["phases"][1]["memory_bytes"]  # below the generation phase
    assert doctor["seconds"] > 10 * run["phases"][3]["seconds"]  # every variant is a drafter pass


def test_plan_bad_inputs_are_one_line(folders, tmp_path):
    bad = write(tmp_path / "llama", {**TINY, "model_type": "llama"})
    for args, fragment in (
        (["--target", str(bad), "--drafter", str(folders["qwen3-8b-dflash"])], "model_type'='llama'"),
        (["--target", str(folders["qwen3-8b"]), "--drafter", str(folders["qwen3-8b-dflash"]), "--accelerator", "tpu"],
         "--accelerator 'tpu'"),
        (["--target", str(folders["qwen3-8b"]), "--drafter", str(folders["qwen3-8b"])], "not a DFlash checkpoint"),
    ):
        result = runner.invoke(app, ["plan", *args])
        assert result.exit_code == 2 and fragment in result.output and "Traceback" not in result.output, result.output


class _Properties:
    def __init__(self, total: int):
        self.total_memory = total


def _fake_cuda(monkeypatch, total: int, current: int = 0) -> None:
    """torch.cuda as on a machine with 8 GPUs of `total` bytes each (nothing is placed on them)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 8)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: current)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: _Properties(total))


def _meta_target(folder: Path, device: str):
    """The target `run` would load from `folder` (bf16), built on the meta device (no weight read), its
    inputs on `device` as `run` resolves it."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from dflash_eval.formats.validation import TargetInfo
    from dflash_eval.model.kernels import decoder_layers
    from dflash_eval.model.target import Target

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(folder, local_files_only=True),
                                                 dtype=torch.bfloat16)
    return Target(model=model, tokenizer=None, name="27b", path=folder, device=torch.device(device),
                  dtype=torch.bfloat16, info=TargetInfo("27b", 64, 5120, 248320), layers=decoder_layers(model))


def test_run_and_plan_choose_one_generation_batch_and_predict_the_same_bytes_on_the_27b(folders, monkeypatch):
    """Qwen3.6-27B's shape on an 80 GB H100, HumanEval x 2048 new tokens: `run` (its rule on the target it
    loaded, here built on the meta device) and `plan` (config arithmetic) choose the same batch, 36 (bare
    `cuda` once counted 0 bytes of weights and chose 64), and predict the same bytes, to the byte, whether the
    device is named `cuda`, `cuda:0`, a torchrun rank's `cuda:3` or a --device-map's input device; 2048-token
    prompts get 27. The plan's generate phase is that prediction plus the prefill's activations."""
    from dflash_eval.commands.plan import PlanSettings
    from dflash_eval.commands.plan import generation_budget as plan_budget
    from dflash_eval.commands.plan_inputs import prompt_lengths
    from dflash_eval.pipeline.continuations import generation_batch_size, run_generation_budget

    h100 = R.accelerator("h100")
    _fake_cuda(monkeypatch, h100.memory_bytes)
    code, doc = plan_json("--target", str(folders["qwen3.6-27b"]), "--drafter", str(folders["qwen3.6-27b-dflash"]),
                          "--prompts", "humaneval", "--max-new-tokens", "2048", "--accelerator", "h100")
    planned = doc["batches"]["generation_budget"]
    lengths, _ = prompt_lengths(folders["qwen3.6-27b"], PUBLIC["qwen3.6-27b"], PlanSettings(prompts="humaneval"))
    for device in ("cuda", "cuda:0", "cuda:3"):
        target = _meta_target(folders["qwen3.6-27b"], device)
        budget = run_generation_budget(target, lengths, 2048)
        assert budget.to_dict() == planned, device  # every figure, to the byte
        assert generation_batch_size(target, lengths, 2048) == doc["batches"]["generation"] == 36
    assert planned["resident_bytes"] == doc["target"]["weight_bytes"] == 53_791_996_928  # the target alone
    generate = next(p for p in doc["phases"] if p["name"] == "generate")
    assert generate["memory_bytes"] == planned["predicted_bytes"] + generate["parts"]["prefill activations"]
    assert code == 0 and generate["memory_bytes"] <= doc["usable_bytes"]
    long_prompts = run_generation_budget(_meta_target(folders["qwen3.6-27b"], "cuda"), [2048] * 164, 2048)
    assert long_prompts.batch == 27
    assert long_prompts == plan_budget(PUBLIC["qwen3.6-27b"], h100, doc["target"]["weight_bytes"], [2048] * 164, 2048)


def test_run_and_plan_agree_on_the_tiny_test_bed(test_bed, drafter_dirs, monkeypatch, tmp_path):
    """The same on a real loaded target: plan from the test bed's config and tokenizer, run's rule on the
    loaded bf16 model (its parameters counted), on a patched 80 GiB CUDA device; and on the same target
    dispatched by accelerate (half its layers offloaded to disk), as --device-map places it."""
    from dflash_eval.model.target import load_target
    from dflash_eval.pipeline.continuations import run_generation_budget, template_ids
    from dflash_eval.pipeline.prompts import load_prompts

    code, doc = plan_json("--target", str(test_bed["qwen3"]), "--drafter", str(drafter_dirs["zlab"]),
                          "--prompts", "demo", "--max-new-tokens", "24", "--accelerator", "h100")
    target = load_target(str(test_bed["qwen3"]), device="cpu", dtype="bfloat16")
    prompts = load_prompts("demo")  # a run's prompts: what its generation is planned over
    lengths = [len(template_ids(target.tokenizer, p, False)) for p in prompts]
    layers = len(target.layers)
    placed = {"model.embed_tokens": "cpu", "model.norm": "cpu", "model.rotary_emb": "cpu", "lm_head": "cpu",
              **{f"model.layers.{i}": "cpu" if i < layers // 2 else "disk" for i in range(layers)}}
    split = load_target(str(test_bed["qwen3"]), device="cpu", dtype="bfloat16", device_map=placed,
                        offload_folder=str(tmp_path / "offload"))
    assert {p.device.type for p in split.model.parameters()} == {"cpu", "meta"}
    _fake_cuda(monkeypatch, R.accelerator("h100").memory_bytes)
    target.device = torch.device("cuda:0")  # nothing runs: the rule reads the device's memory and the weights
    assert run_generation_budget(target, lengths, 24).to_dict() == doc["batches"]["generation_budget"]
    assert doc["batches"]["generation_budget"]["batch"] == len(lengths) == 12  # never more than the prompts
    split.device = torch.device("cuda:0")
    assert run_generation_budget(split, lengths, 24).to_dict() == doc["batches"]["generation_budget"]


def test_the_modelled_cold_run_in_performance_md_is_plans_own_figure(folders):
    """docs/performance.md's cold 27B run on one H200 starts from `plan`'s minutes for HumanEval x 2048: its
    rows are the plan's phases, and its batches the plan's generation batch."""
    import re

    doc = (Path(__file__).resolve().parents[1] / "docs" / "performance.md").read_text()
    section = doc[doc.index("## A cold run of the 27B on one H200"):]
    row = {name: float(re.search(rf"^\| (?:\*\*)?{re.escape(name)}[^|]*\| (?:\*\*)?([\d.]+)", section, re.M).group(1))
           for name in ("generate", "tap pass", "drafter pass", "warm run at the roof")}
    _, plan = plan_json("--target", str(folders["qwen3.6-27b"]), "--drafter", str(folders["qwen3.6-27b-dflash"]),
                        "--prompts", "humaneval", "--max-new-tokens", "2048", "--accelerator", "h200")
    phases = {p["name"]: p["seconds"] for p in plan["phases"]}
    for name, phase in (("generate", "generate"), ("tap pass", "taps"), ("drafter pass", "drafter pass")):
        assert row[name] == round(phases[phase], 1), name
    assert row["warm run at the roof"] == round(phases["generate"] + phases["taps"] + phases["drafter pass"], 1)
    G = plan["batches"]["generation"]
    sizes = [min(G, 164 - i) for i in range(0, 164, G)]
    assert f"generate: {len(sizes)} batches ({', '.join(map(str, sizes))})" in section
