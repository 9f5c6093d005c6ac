"""MaxText's `jax_cache_dir`: JAX's persistent compilation cache for every local workload process."""

from __future__ import annotations

import os


def use_compilation_cache(directory: str) -> None:
    """What MaxText's pyconfig does with `jax_cache_dir` (maxtext/configs/pyconfig.py, 0.2.5): JAX's persistent
    compilation cache in that directory (`~` expanded), JAX's own thresholds unchanged; nothing for ""."""
    if directory:
        from jax.experimental.compilation_cache import compilation_cache

        compilation_cache.set_cache_dir(os.path.expanduser(directory))
