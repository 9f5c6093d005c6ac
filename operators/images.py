"""The image allowlist: which container images the operators may put on the cluster.

An Airflow Variable, ``elastic_training_allowed_images``, lists image prefixes (a JSON list of strings, or
text with one prefix per line or comma-separated). Unset means no limit. Every container and init container
of the JobSet an operator is about to create must match a prefix, or nothing is created. The Pathways
sidecar and server images of the elastic JobSet (the spec's ``pathways_server_image`` and
``pathways_proxy_image``) are checked like the user's image, so an allowlist for GKE names them too
(``us-docker.pkg.dev/cloud-tpu-v2-images/pathways/``).

Matching follows image reference components (distribution/reference): a prefix matches the image itself,
or the image continuing after the prefix with ``/``, ``:`` or ``@`` (or a prefix that ends with one of
them). So ``gcr.io/my-org`` allows ``gcr.io/my-org/maxtext:1`` but not ``gcr.io/my-org-evil/maxtext``.
No normalisation: ``ubuntu`` and ``docker.io/library/ubuntu`` are different strings, and the check fails
closed on a set Variable that lists nothing or is malformed.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from typing import Any, Final

from elastic_training.operators.shown import shown
from elastic_training.operators.spec import SpecError

ALLOWED_IMAGES_VARIABLE: Final = "elastic_training_allowed_images"
_SEPARATORS: Final = ("/", ":", "@")
# What an image reference (or a leading part of one) can contain.
_PREFIX = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/@\[\]-]*\Z")


def parse_allowed_images(raw: object) -> tuple[str, ...]:
    """The prefixes of a set Variable value; `SpecError` when it lists none or is not a list of strings."""
    if isinstance(raw, str):
        text = raw.strip()
        if text.startswith("["):
            try:
                raw = json.loads(text)
            except ValueError:
                raise SpecError(ALLOWED_IMAGES_VARIABLE, "is not a JSON list of image prefixes") from None
        else:
            raw = [part for line in text.splitlines() for part in line.split(",")]
    if not isinstance(raw, list | tuple) or not all(isinstance(p, str) for p in raw):
        raise SpecError(ALLOWED_IMAGES_VARIABLE, f"must list image prefixes, got {shown(raw)}")
    prefixes = tuple(p.strip() for p in raw if p.strip())
    for prefix in prefixes:
        if not _PREFIX.match(prefix):
            raise SpecError(ALLOWED_IMAGES_VARIABLE, f"{shown(prefix)} is not an image prefix")
    if not prefixes:
        raise SpecError(
            ALLOWED_IMAGES_VARIABLE, "is set but lists no image prefix (delete the Variable to allow any image)"
        )
    return prefixes


def image_allowed(image: str, prefixes: tuple[str, ...]) -> bool:
    """Whether `image` is one of `prefixes` or continues one of them at a reference component boundary."""
    for prefix in prefixes:
        if image == prefix:
            return True
        if image.startswith(prefix) and (prefix.endswith(_SEPARATORS) or image[len(prefix)] in _SEPARATORS):
            return True
    return False


def manifest_images(manifest: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """``(where, image)`` for every container and init container of a JobSet manifest."""
    for rjob in manifest["spec"]["replicatedJobs"]:
        pod_spec = rjob["template"]["spec"]["template"]["spec"]
        for kind in ("initContainers", "containers"):
            for container in pod_spec.get(kind) or []:
                yield f"{rjob['name']}/{container['name']}", str(container["image"])


def check_images(manifest: Mapping[str, Any], prefixes: tuple[str, ...] | None) -> None:
    """`SpecError` naming the first container whose image `prefixes` do not allow (``None``: no limit)."""
    if prefixes is None:
        return
    for where, image in manifest_images(manifest):
        if not image_allowed(image, prefixes):
            raise SpecError(
                "image",
                f"{image!r} ({where}) is not allowed: the Airflow Variable {ALLOWED_IMAGES_VARIABLE} allows only "
                f"images under {', '.join(prefixes)}",
            )


def allowed_images() -> tuple[str, ...] | None:
    """The prefixes of the Airflow Variable, or ``None`` when it is not set (no limit)."""
    from airflow.sdk import Variable

    raw = Variable.get(ALLOWED_IMAGES_VARIABLE, default=None)
    return None if raw is None else parse_allowed_images(raw)


def enforce_allowed_images(manifest: Mapping[str, Any]) -> None:
    """`AirflowFailException` unless every image of `manifest` is allowed; call before creating anything."""
    from airflow.sdk.exceptions import AirflowFailException

    try:
        check_images(manifest, allowed_images())
    except SpecError as error:
        raise AirflowFailException(f"refused before creating anything: {error}") from None
