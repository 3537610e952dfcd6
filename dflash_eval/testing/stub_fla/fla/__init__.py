"""A stand-in for flash-linear-attention (`fla`) on machines without CUDA: the package path, version and
kernel signatures transformers binds at import (`fla.ops.gated_delta_rule.chunk_gated_delta_rule` and
`fused_recurrent_gated_delta_rule`, through `use_kernel_func_from_hub_with_fallback`), computed in pure
torch. Put `dflash_eval/testing/stub_fla` on PYTHONPATH and transformers binds these exactly where it would
bind the real kernels, so the code paths that differ with fla bound run on CPU (the GPU check's rehearsal).

Like the real Triton kernels, these refuse CPU tensors, unless `DFLASH_EVAL_STUB_FLA_ON_CPU=1` marks the
process as one where the CPU stands in for the accelerator: a process that would launch a real fla
kernel on CPU tensors crashes here too, with the same cause.
"""

__version__ = "0.6.0"
