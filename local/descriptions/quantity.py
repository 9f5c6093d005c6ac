"""Kubernetes resource quantities (``500m``, ``100G``, ``32Gi``, ``4``), parsed as apimachinery does.

Follows kubernetes/kubernetes ``staging/src/k8s.io/apimachinery/pkg/api/resource/quantity.go``
(``ParseQuantity``): a signed decimal number, then a binary suffix (Ki Mi Gi Ti Pi Ei), a decimal
suffix (n u m k M G T P E) or a decimal exponent (``1e3``). Values are exact fractions, so
``0.5`` and ``500m`` compare equal as they do upstream.
"""

from __future__ import annotations

import re
from fractions import Fraction

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
_QUANTITY = re.compile(r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]+)?$")


class QuantityError(ValueError):
    """A string that is not a Kubernetes quantity."""


def parse_quantity(value: str | int | float) -> Fraction:
    """The exact value of ``value`` (``"100G"`` → 10**11); ``QuantityError`` when it is not a quantity."""
    if isinstance(value, bool):
        raise QuantityError(f"quantities must match the regular expression {_QUANTITY.pattern!r}")
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        return Fraction(str(value))
    match = _QUANTITY.match(str(value).strip())
    if match is None:
        raise QuantityError(f"quantities must match the regular expression {_QUANTITY.pattern!r}")
    number, suffix = Fraction(match.group(1)), match.group(2) or ""
    if suffix in _BINARY:
        return number * _BINARY[suffix]
    if suffix in _DECIMAL:
        return number * _DECIMAL[suffix]
    return number * Fraction(10) ** int(suffix[1:])
