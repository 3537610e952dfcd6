"""Which kernels a target's Gated-DeltaNet layers run (fla's Triton kernels or transformers' torch fallback),
recorded in provenance, and the switch that routes them to the torch fallback (`--kernels torch`)."""

from __future__ import annotations

import inspect
import logging
import sys
from contextlib import contextmanager
from dataclasses import dataclass

from torch import nn

from ..core.errors import InputError

# Module-level functions of the hybrid modeling files that transformers may swap for kernels.
KERNEL_FUNCTIONS = {
    "chunk_gated_delta_rule": "torch_chunk_gated_delta_rule",
    "recurrent_gated_delta_rule": "torch_recurrent_gated_delta_rule",
    "causal_conv1d_fn": "causal_conv1d_fn",
    "causal_conv1d_update": "causal_conv1d_update",
}


@dataclass(frozen=True)
class LayerKernel:
    """The implementation one Gated-DeltaNet layer will call for one operation."""

    layer: int
    operation: str  # chunk_gated_delta_rule, recurrent_gated_delta_rule, causal_conv1d_fn, ...
    function: str  # fully qualified name of the bound function
    accelerated: bool  # True for fla / causal-conv1d / hub kernels, False for the torch fallback


def decoder_layers(model: nn.Module) -> nn.ModuleList:
    base = getattr(model, "model", model)
    base = getattr(base, "language_model", base)
    layers = getattr(base, "layers", None)
    if not isinstance(layers, nn.ModuleList):
        raise InputError(None, f"{type(model).__name__}: cannot find the decoder layer list")
    return layers


def _bound_function(module, operation: str) -> tuple[str, bool]:
    """Resolve what a Gated-DeltaNet layer will call for `operation`."""
    fn = getattr(module, operation, None)  # some transformers versions bind per instance
    if fn is None:
        fn = getattr(sys.modules[type(module).__module__], KERNEL_FUNCTIONS[operation], None)
    if fn is None:
        return "absent", False
    # transformers wraps the torch fallback; the chosen implementation lives in the wrapper's closure
    closure = inspect.getclosurevars(fn).nonlocals if getattr(fn, "__closure__", None) else {}
    impl = closure.get("implementation", fn)
    name = f"{getattr(impl, '__module__', '?')}.{getattr(impl, '__qualname__', repr(impl))}"
    return name, not name.startswith("transformers.")


def kernel_report(model: nn.Module) -> list[LayerKernel]:
    """Per Gated-DeltaNet layer and operation, the function actually bound (empty for dense targets)."""
    report = []
    for index, layer in enumerate(decoder_layers(model)):
        gdn = getattr(layer, "linear_attn", None)
        if gdn is None:
            continue
        for operation in KERNEL_FUNCTIONS:
            name, accelerated = _bound_function(gdn, operation)
            report.append(LayerKernel(index, operation, name, accelerated))
    return report


@contextmanager
def torch_fallback_kernels(model: nn.Module):
    """Temporarily route every Gated-DeltaNet operation to transformers' pure-torch fallback.

    transformers binds fla kernels at import time for the whole process; to compare fla and fallback
    hidden states in one process (the GPU check, the doctor) we swap the modeling module's globals for
    the fallback the wrapper closes over, filtering keyword arguments as the wrapper does."""
    swapped: list[tuple[object, str, object]] = []
    modules = {sys.modules[type(layer.linear_attn).__module__] for layer in decoder_layers(model)
               if getattr(layer, "linear_attn", None) is not None}
    for module in modules:
        for global_name in KERNEL_FUNCTIONS.values():
            wrapper = getattr(module, global_name, None)
            if wrapper is None or not getattr(wrapper, "__closure__", None):
                continue
            fallback = inspect.getclosurevars(wrapper).nonlocals.get("torch_function")
            if fallback is None:
                continue
            accepted = set(inspect.signature(fallback).parameters)

            def call(*args, _fallback=fallback, _accepted=accepted, **kwargs):
                return _fallback(*args, **{k: v for k, v in kwargs.items() if k in _accepted})

            call.__module__, call.__qualname__ = fallback.__module__, fallback.__qualname__
            swapped.append((module, global_name, wrapper))
            setattr(module, global_name, call)
    try:
        yield
    finally:
        for module, name, original in swapped:
            setattr(module, name, original)


def kernel_summary(report: list[LayerKernel]) -> dict[str, str]:
    """operation -> bound function (all layers of one model share them); for provenance."""
    return {k.operation: k.function for k in report}


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
