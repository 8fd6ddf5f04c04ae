"""rill.amp: mixed precision. `autocast` runs each op in the dtype policy.py's table gives
it; `GradScaler` scales the loss so that low-precision gradients neither underflow nor stay
overflowed."""
from .autocast import autocast, get_autocast_dtype, is_autocast_enabled
from .grad_scaler import GradScaler
from .policy import FLOAT32, LOWER, RULES, WIDEST, rule

__all__ = ["autocast", "GradScaler", "is_autocast_enabled", "get_autocast_dtype", "rule",
           "RULES", "LOWER", "FLOAT32", "WIDEST"]
