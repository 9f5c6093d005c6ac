"""The container image reference grammar (distribution/reference ``reference/regexp.go``), checked before launch.

``[registry[:port]/]path[:tag][@digest]`` with a lowercase path, bounded lengths, and none of the characters a
shell or a YAML reader treats specially. Pure.
"""

from __future__ import annotations

import re
from typing import Final

from elastic_training.operators.shown import shown

# Characters a shell or a YAML reader would treat specially; never part of a valid image reference.
SHELL_META: Final = frozenset(" \t\n\r;&|$`\\\"'<>(){}[]*?!#~")

# Docker image reference grammar (distribution/reference): [domain[:port]/]path[:tag][@digest].
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[0-9a-fA-F:]+\])(?::[0-9]+)?"
_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_NAME = rf"(?:{_DOMAIN}/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*"
_TAG = r"[\w][\w.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
_IMAGE_REFERENCE = re.compile(rf"^(?P<name>{_NAME})(?::{_TAG})?(?:@{_DIGEST})?\Z")
_IMAGE_NAME_MAX = 255
_IMAGE_REFERENCE_MAX = _IMAGE_NAME_MAX + 1 + 128 + 1 + 200  # name, tag, digest


def image_reference_error(image: object) -> str | None:
    """Why `image` is not a container image reference (`[registry/]path[:tag][@digest]`), or None."""
    if not isinstance(image, str) or not image:
        return "must be a non-empty image reference such as us-docker.pkg.dev/project/repo/maxtext:tag"
    if len(image) > _IMAGE_REFERENCE_MAX:
        return f"is {len(image)} characters long; an image reference is at most {_IMAGE_REFERENCE_MAX}"
    bad = sorted({c for c in image if c in SHELL_META or not c.isprintable()})
    if bad:
        return f"{shown(image)} contains characters not allowed in an image reference: {''.join(bad)!r}"
    match = _IMAGE_REFERENCE.match(image)
    if match is None:
        return (
            f"{shown(image)} is not an image reference: expected [registry[:port]/]path[:tag][@sha256:digest] with a "
            "lowercase path"
        )
    if len(match["name"]) > _IMAGE_NAME_MAX:
        return f"the image name is longer than {_IMAGE_NAME_MAX} characters"
    return None
