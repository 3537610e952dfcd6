"""transformers' forward conventions across the supported 5.x range: what the cache argument is called and
where a forward returns the cache. Its own module because both the target (model/target.py) and the kernel
probe (model/kernels.py), which the target imports, call the model this way."""

from __future__ import annotations

import inspect

from torch import nn


def cache_keyword(model: nn.Module) -> str:
    """transformers >= 5.2x names the cache argument `cache`; earlier 5.x call it `past_key_values`."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def output_cache(output):
    """The cache a forward returned: `cache` on transformers >= 5.2x (reading `past_key_values` there logs a
    deprecation), `past_key_values` on earlier 5.x."""
    fields = getattr(type(output), "__dataclass_fields__", {})
    return output.cache if "cache" in fields else output.past_key_values
