"""How a value appears in an error message: its ``repr``, bounded. Pure."""

from __future__ import annotations

from typing import Final

_SHOWN_MAX: Final = 80


def shown(value: object) -> str:
    """`repr(value)` for an error message, bounded (a templated value can be huge, or too long to `repr`)."""
    try:
        text = repr(value)
    except ValueError:  # an int of more digits than Python converts to text
        return "an integer too large to print"
    return text if len(text) <= _SHOWN_MAX else f"{text[: _SHOWN_MAX - 3]}..."
