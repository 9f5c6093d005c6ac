"""Hypothesis strategies for hostile values: what a templated field, a Variable or a typo can render to."""

from __future__ import annotations

import math
import os
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

# Modest: the suite runs in `make test` on a loaded 2-core machine. A deeper search:
# `ELASTIC_HOSTILE_EXAMPLES=5000 pytest tests/hostile tests/security`. No per-example deadline: it is a timing
# assertion (2 s failed test_any_field_any_value on a box at load 28); a hang is pytest-timeout's (pyproject.toml).
HOSTILE = settings(
    max_examples=int(os.environ.get("ELASTIC_HOSTILE_EXAMPLES", "150")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

# Characters people and templates actually produce: separators, quotes, shell and YAML metacharacters,
# control characters, non-ASCII digits and letters, line separators, a right-to-left mark.
NASTY_CHARS = " \t\n\r\x00\x1b;&|$`\\\"'<>(){}[]*?!#~=:,@/.%+-_\u2028\u00a0\u200f\u0663\uff11\u0130\u212a"
nasty_text = st.text(alphabet=st.sampled_from(NASTY_CHARS) | st.characters(blacklist_categories=("Cs",)), max_size=40)
words = st.sampled_from(
    [
        "",
        " ",
        "None",
        "null",
        "true",
        "True",
        "false",
        "nan",
        "inf",
        "-1",
        "0",
        "1e3",
        "0x10",
        "1_000",
        "\uff12",
        "\u0663",
    ]
)
# 10**5000 has more digits than `str()` converts (ValueError); built lazily so hypothesis never reprs it.
huge_ints = st.sampled_from([2**31, 2**31 - 1, 2**63, -(2**63), 10**30]) | st.just(5000).map(lambda n: 10**n)


def numbers_ish() -> st.SearchStrategy[Any]:
    """What an integer field can render to: ints, huge ints, bools, floats (NaN, inf), numeric-looking strings."""
    return st.one_of(
        st.integers(-5, 10**6),
        huge_ints,
        st.booleans(),
        st.floats(allow_nan=True, allow_infinity=True),
        st.just(math.nan),
        st.integers(-5, 10**6).map(str),
        st.integers(0, 10**6).map(lambda n: f" {n}\n"),
        st.just("9" * 5000),
        words,
        nasty_text,
        st.none(),
        st.lists(st.integers(), max_size=2),
    )


def anything() -> st.SearchStrategy[Any]:
    """Any value a rendered template or a typo can produce."""
    scalars = st.one_of(st.none(), st.booleans(), st.integers(), huge_ints, st.floats(), nasty_text, words)
    return st.recursive(
        scalars,
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
        max_leaves=6,
    )
