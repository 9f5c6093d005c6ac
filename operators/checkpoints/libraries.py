"""The libraries a check needs beyond the core install, and the error that names the extra installing them.

The restore checks (deep validation, shapes and dtypes against a reference step) read arrays with Orbax
and JAX, which a team's Airflow image need not carry (about 400 MB): they come with the ``[deep]`` extra.
A check whose library is missing never passes; it stops with `MissingLibraryError`.
"""

from __future__ import annotations

DEEP_INSTALL = "pip install 'elastic-training[deep]'"


class MissingLibraryError(ImportError):
    """A check's library is not installed; the message says which extra installs it."""


def require_restore_libraries(check: str) -> None:
    """Import what the restore checks need, or raise `MissingLibraryError` naming the ``[deep]`` extra."""
    try:
        import jax  # noqa: F401
        import orbax.checkpoint  # noqa: F401
        from etils import epath  # noqa: F401
    except ImportError as exc:
        missing = exc.name or str(exc)
        raise MissingLibraryError(
            f"{check} needs orbax-checkpoint and jax, and {missing} is not installed: {DEEP_INSTALL}",
            name=exc.name,
        ) from exc
