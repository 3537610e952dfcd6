"""A stand-in for flash-linear-attention (`fla`) on machines without CUDA: the package path, version and
kernel signatures transformers binds at import (`fla.ops.gated_delta_rule.chunk_gated_delta_rule` and
`fused_recurrent_gated_delta_rule`, through `use_kernel_func_from_hub_with_fallback`), computed in pure
torch. Put `dflash_eval/testing/stub_fla` on PYTHONPATH and transformers binds these exactly where it would
bind the real kernels, so the code paths that differ with fla bound run on CPU (the GPU check's rehearsal).

Routed to as on a GPU: transformers >= 5.25 sends an operation to fla only for inputs on the device types it
lists for the package (`hub_kernels._PACKAGE_SUPPORTED_DEVICES["fla"]`, read when a modeling module is
decorated, right after it imports fla), and CPU inputs to its torch path, so an unrouted stub would never be
called. Imported by transformers, the stub adds "cpu" to that entry: every version then calls it where it
would call the real fla on a GPU (earlier versions call fla whatever the device).

Like the real Triton kernels, these refuse CPU tensors, unless `DFLASH_EVAL_STUB_FLA_ON_CPU=1` marks the
process as one where the CPU stands in for the accelerator: a process that would launch a real fla
kernel on CPU tensors crashes here too, with the same cause.
"""

import importlib
import importlib.util

__version__ = "0.6.0"

# imported first (before transformers), the stub still routes: the entry is read when a modeling module is
# decorated, which comes later
_hub = (importlib.import_module("transformers.integrations.hub_kernels")
        if importlib.util.find_spec("transformers") is not None else None)
if _hub is not None and isinstance(getattr(_hub, "_PACKAGE_SUPPORTED_DEVICES", None), dict):
    _devices = _hub._PACKAGE_SUPPORTED_DEVICES.get("fla", ())
    if "cpu" not in _devices:
        _hub._PACKAGE_SUPPORTED_DEVICES["fla"] = (*_devices, "cpu")
