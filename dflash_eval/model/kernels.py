"""Which kernels a target's Gated-DeltaNet layers run (fla's Triton kernels or transformers' torch fallback),
decided by what is actually called, and the switch that routes them to the torch fallback (`--kernels torch`).

Why a probe and not the shape of a wrapper: transformers has wrapped these operations three ways so far (a
closure over the chosen implementation up to 5.2x; from 5.25, with the `kernels` package installed, a
`kernels` `Func` module whose forward calls that closure, which itself picks fla or torch by the *device of
the inputs*), and the next version may wrap them a fourth way. Reading a wrapper's closure reported `Func()`
and "torch" while fla ran. So `kernel_report` runs one tiny forward (a 3-token prefill and one cached decode
step: every operation is reached) with counting proxies in front of each operation and a profile hook that
sees which Python function runs underneath: transformers' torch implementation (named like the operation's
global) or code of another package (fla, causal-conv1d, a hub kernel). The one answer feeds the CPU refusal,
provenance, the continuation cache key, doctor's fla-vs-fallback comparison and the GPU check.

The probe's cost: one forward of 3 + 1 tokens per model and binding state, remembered for the model's
lifetime (`_PROBED`, a memo keyed by the model object and the objects bound, so a swap is probed afresh). On
a GPU its first call compiles the fla kernels, which fla's autotuner keys by head sizes and chunk width,
not sequence length: the run reuses them.
"""

from __future__ import annotations

import importlib.metadata
import inspect
import logging
import sys
import threading
import weakref
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import nn

from ..core.errors import InputError
from .hf_forward import cache_keyword, output_cache

# Gated-DeltaNet operation -> the name of transformers' torch implementation, which is also the module global
# (or, in some versions, the instance attribute named like the operation) the layer's forward calls.
OPERATIONS = {
    "chunk_gated_delta_rule": "torch_chunk_gated_delta_rule",
    "recurrent_gated_delta_rule": "torch_recurrent_gated_delta_rule",
    "causal_conv1d_fn": "causal_conv1d_fn",
    "causal_conv1d_update": "causal_conv1d_update",
}
NOT_CALLED = "not called"
# Packages whose code sits between the layer and the implementation (dispatch, wrappers, tensor ops): a call
# into them decides nothing. Any other package's code reached inside an operation is its accelerated kernel.
DISPATCH_PACKAGES = frozenset({"torch", "transformers", "kernels", "accelerate", "dflash_eval", "typing_extensions",
                               "huggingface_hub", "safetensors", "packaging", "_pytest", "pytest", "coverage"})


@dataclass(frozen=True)
class LayerKernel:
    """What one Gated-DeltaNet layer ran for one operation in the probe forward."""

    layer: int
    operation: str  # chunk_gated_delta_rule, recurrent_gated_delta_rule, causal_conv1d_fn, causal_conv1d_update
    function: str  # fully qualified name of the function that ran ("not called" if the probe never reached it)
    accelerated: bool  # True for fla / causal-conv1d / hub kernels, False for transformers' torch implementation
    calls: int = 0  # calls of the operation in the probe forward


def decoder_layers(model: nn.Module) -> nn.ModuleList:
    base = getattr(model, "model", model)
    base = getattr(base, "language_model", base)
    layers = getattr(base, "layers", None)
    if not isinstance(layers, nn.ModuleList):
        raise InputError(None, f"{type(model).__name__}: cannot find the decoder layer list")
    return layers


def gated_deltanet_layers(model: nn.Module) -> list[tuple[int, nn.Module]]:
    """(decoder layer index, its Gated-DeltaNet module) for every linear-attention layer; empty for dense targets."""
    return [(i, layer.linear_attn) for i, layer in enumerate(decoder_layers(model))
            if getattr(layer, "linear_attn", None) is not None]


def _bindings(model: nn.Module) -> list[tuple[object, str, str]]:
    """(holder, attribute, operation) for every place a Gated-DeltaNet forward looks an operation up: the
    modeling module's global, and an instance attribute named like the operation where a version binds one."""
    found, seen = [], set()
    for _, gdn in gated_deltanet_layers(model):
        module = sys.modules[type(gdn).__module__]
        for operation, name in OPERATIONS.items():
            if (id(module), name) not in seen and getattr(module, name, None) is not None:
                seen.add((id(module), name))
                found.append((module, name, operation))
            if operation in vars(gdn):
                found.append((gdn, operation, operation))
    return found


def transformers_version() -> str:
    try:
        return importlib.metadata.version("transformers")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


# --- the probe ----------------------------------------------------------------------------------------------

class _Call:
    """One call of an operation inside the probe: the first implementation reached decides it."""

    __slots__ = ("operation", "layer", "function", "accelerated")

    def __init__(self, operation: str, layer: int | None):
        self.operation, self.layer = operation, layer
        self.function: str | None = None
        self.accelerated = False


class _Recorder:
    """The probe's state: the Gated-DeltaNet layer running (set by forward pre-hooks), the operation calls in
    progress (pushed by the counting proxies) and, per (layer, operation), what each call ran."""

    def __init__(self):
        self.layer: int | None = None
        self.stack: list[_Call] = []
        self.calls: list[_Call] = []
        self.thread = threading.get_ident()

    def profile(self, frame, event, _arg):
        if event != "call" or not self.stack or threading.get_ident() != self.thread:
            return
        call = self.stack[-1]
        if call.function is not None:
            return
        code = frame.f_code
        module = frame.f_globals.get("__name__", "") or ""
        top = module.split(".")[0]
        name = f"{module}.{getattr(code, 'co_qualname', code.co_name)}"
        if code.co_name == OPERATIONS[call.operation] and top == "transformers":
            call.function, call.accelerated = name, False  # transformers' torch implementation
        elif top and top not in DISPATCH_PACKAGES and top not in sys.stdlib_module_names:
            call.function, call.accelerated = name, True  # another package's kernel: fla, causal_conv1d, a hub kernel


class _Counting:
    """Stands in front of one operation during the probe: records the call, then calls what was bound."""

    def __init__(self, recorder: _Recorder, operation: str, bound):
        self.recorder, self.operation, self.bound = recorder, operation, bound

    def __call__(self, *args, **kwargs):
        call = _Call(self.operation, self.recorder.layer)
        self.recorder.stack.append(call)
        try:
            return self.bound(*args, **kwargs)
        finally:
            self.recorder.stack.pop()
            self.recorder.calls.append(call)


@torch.inference_mode()
def _probe_forward(model: nn.Module) -> None:
    """A 3-token prefill with a cache and one cached decode step: the chunked and the recurrent delta rule, the
    convolution over a sequence and its one-step update. The inputs go where the input embedding is (the probe
    is skipped when weights sit on the meta device, as offloaded ones do)."""
    base = getattr(model, "model", model)
    device = model.get_input_embeddings().weight.device
    vocab = model.get_input_embeddings().weight.shape[0]
    ids = (torch.arange(1, 4, device=device) % vocab)[None]
    out = base(input_ids=ids, use_cache=True)
    cache = output_cache(out)
    base(input_ids=ids[:, -1:], use_cache=True, **{cache_keyword(base): cache})


# the memo of probes: model -> {binding identities: report}; weak, so a model's probes go with it
_PROBED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _binding_key(model: nn.Module) -> tuple:
    return tuple((id(holder), name, id(getattr(holder, name))) for holder, name, _ in _bindings(model))


def probe_kernels(model: nn.Module) -> list[LayerKernel]:
    """Run the probe forward and report, per Gated-DeltaNet layer and operation, what ran and how often.

    An exception inside the forward (a Triton kernel launched on CPU tensors) ends the probe; what was reached
    before it is reported, so the caller can name the kernel instead of showing the crash."""
    layers = gated_deltanet_layers(model)
    if not layers:
        return []
    if any(p.device.type == "meta" for p in model.parameters()):
        return [LayerKernel(i, op, "not probed (weights on the meta device)", False) for i, _ in layers
                for op in OPERATIONS]
    recorder = _Recorder()
    bindings = _bindings(model)
    originals = [(holder, name, getattr(holder, name)) for holder, name, _ in bindings]
    hooks = []
    for index, gdn in layers:
        hooks.append(gdn.register_forward_pre_hook(lambda _m, _a, i=index: setattr(recorder, "layer", i)))
        hooks.append(gdn.register_forward_hook(lambda _m, _a, _o: setattr(recorder, "layer", None)))
    previous = sys.getprofile()
    failure: Exception | None = None
    try:
        for (holder, name, operation), (_, _, bound) in zip(bindings, originals):
            setattr(holder, name, _Counting(recorder, operation, bound))
        sys.setprofile(recorder.profile)
        try:
            _probe_forward(model)
        except Exception as exc:  # reported with what was reached; see the docstring
            failure = exc
    finally:
        sys.setprofile(previous)
        for holder, name, bound in originals:
            setattr(holder, name, bound)
        for hook in hooks:
            hook.remove()
    report = []
    for index, _ in layers:
        for operation in OPERATIONS:
            calls = [c for c in recorder.calls if c.layer == index and c.operation == operation]
            ran = [c for c in calls if c.function is not None]
            function = ran[0].function if ran else NOT_CALLED
            kinds = {(c.function, c.accelerated) for c in ran}
            if len(kinds) > 1:
                function = " + ".join(sorted({c.function for c in ran}))
            report.append(LayerKernel(index, operation, function, any(c.accelerated for c in ran), len(calls)))
    if failure is not None and not any(k.accelerated for k in report):
        raise failure
    return report


def kernel_report(model: nn.Module) -> list[LayerKernel]:
    """Per Gated-DeltaNet layer and operation, the function that runs (empty for dense targets): the probe's
    answer for the model as it is bound now (remembered until the binding changes)."""
    if not gated_deltanet_layers(model):
        return []
    key = _binding_key(model)
    probes = _PROBED.setdefault(model, {})
    if key not in probes:
        probes[key] = probe_kernels(model)
    return probes[key]


def kernel_summary(report: list[LayerKernel]) -> dict[str, str]:
    """operation -> the function that ran (all layers of one model share it; several are joined by " + ", and
    layers the probe did not reach, after a crash, are left out); for provenance and the cache key."""
    summary: dict[str, str] = {}
    for operation in dict.fromkeys(k.operation for k in report):
        ran = sorted({k.function for k in report if k.operation == operation and k.calls and k.function != NOT_CALLED})
        summary[operation] = " + ".join(ran) or NOT_CALLED
    return summary


def kernel_calls(report: list[LayerKernel]) -> dict[str, dict[str, int]]:
    """operation -> {function: calls over all layers}: what the GPU check prints, so a lease sees the truth."""
    calls: dict[str, dict[str, int]] = {}
    for k in report:
        per = calls.setdefault(k.operation, {})
        per[k.function] = per.get(k.function, 0) + k.calls
    return calls


# --- the switch to the torch fallback -------------------------------------------------------------------------

def torch_implementation(bound, name: str):
    """transformers' torch implementation of an operation, found inside whatever wraps it: the function whose
    code transformers defines under the operation's global `name`, reached through `__wrapped__`, closures, a
    bound method or an nn.Module's forward (the `kernels` Func). None when nothing of that name is reachable."""
    todo, seen = [bound], set()
    while todo and len(seen) < 256:
        item = todo.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        if inspect.isfunction(item):
            if item.__code__.co_name == name and (item.__module__ or "").startswith("transformers."):
                return item
            todo.extend(cell.cell_contents for cell in (item.__closure__ or ()) if _filled(cell))
            todo.extend(v for v in (getattr(item, "__wrapped__", None),) if v is not None)
        elif inspect.ismethod(item):
            todo.append(item.__func__)
        elif isinstance(item, nn.Module):
            todo.append(type(item).forward)
            todo.extend(v for v in vars(item).values() if callable(v))
        elif callable(item):  # a partial, a callable object (a route of ours, a future wrapper)
            todo.extend(v for v in (getattr(item, "__wrapped__", None), getattr(item, "func", None),
                                    getattr(type(item), "__call__", None)) if v is not None)  # noqa: B004 (the method itself)
            todo.extend(v for v in getattr(item, "__dict__", {}).values() if callable(v))
    return None


def _filled(cell) -> bool:
    try:
        _ = cell.cell_contents  # an empty cell raises
    except ValueError:
        return False
    return True


class _TorchRoute:
    """Calls transformers' torch implementation, dropping keyword arguments it does not take (as the wrappers do)."""

    def __init__(self, implementation):
        self.implementation = implementation
        parameters = inspect.signature(implementation).parameters.values()
        self.accepts_all = any(p.kind is p.VAR_KEYWORD for p in parameters)
        self.accepted = {p.name for p in parameters}

    def __call__(self, *args, **kwargs):
        if not self.accepts_all:
            kwargs = {k: v for k, v in kwargs.items() if k in self.accepted}
        return self.implementation(*args, **kwargs)


def fallback_routes(model: nn.Module) -> list[tuple[object, str, object, _TorchRoute]]:
    """(holder, attribute, what is bound, the route to the torch implementation) for every binding, or one line
    naming the operation, the wrapper and transformers' version when a binding hides its torch implementation."""
    routes = []
    for holder, name, operation in _bindings(model):
        bound = getattr(holder, name)
        implementation = torch_implementation(bound, OPERATIONS[operation])
        if implementation is None:
            raise InputError(None, f"--kernels torch: transformers {transformers_version()} binds the Gated-DeltaNet "
                                   f"operation {operation} as a {type(bound).__module__}.{type(bound).__qualname__}, "
                                   f"in which dflash-eval finds no torch implementation named {OPERATIONS[operation]} "
                                   "to route to; run without --kernels torch (the kernels bound are recorded)")
        routes.append((holder, name, bound, _TorchRoute(implementation)))
    return routes


@contextmanager
def torch_fallback_kernels(model: nn.Module):
    """Route every Gated-DeltaNet operation to transformers' pure-torch implementation for the block.

    transformers binds fla at import time for the whole process (and from 5.25 dispatches by the inputs'
    device); to compare fla and fallback hidden states in one process (the GPU check, the doctor) and for
    `--kernels torch`, the objects the layers look up are swapped for a route to the torch implementation,
    whatever wraps it. The probe then checks the swap took: an accelerated call left is refused by name."""
    routes = fallback_routes(model)
    for holder, name, _, route in routes:
        setattr(holder, name, route)
    try:
        left = [k for k in kernel_report(model) if k.accelerated]
        if left:
            raise InputError(None, f"--kernels torch: Gated-DeltaNet layer {left[0].layer} still calls "
                                   f"{left[0].function} for {left[0].operation} after the switch to the torch "
                                   f"implementation (transformers {transformers_version()}); run without --kernels torch")
        yield
    finally:
        for holder, name, bound, _ in routes:
            setattr(holder, name, bound)


class _DropFallbackAdvice(logging.Filter):
    """transformers warns, at the first Gated-DeltaNet forward, that the torch fallback is slower and advises
    installing flash-linear-attention, advice that is wrong on CPU (its kernels need CUDA, and with triton
    importable a CPU run crashes). The kernels in use are recorded in provenance (`kernel_report`) instead."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "falling back to its reference PyTorch implementation" not in record.getMessage()


def quiet_cpu_fallback_advice() -> None:
    hub_logger = logging.getLogger("transformers.integrations.hub_kernels")
    if not any(isinstance(f, _DropFallbackAdvice) for f in hub_logger.filters):
        hub_logger.addFilter(_DropFallbackAdvice())
