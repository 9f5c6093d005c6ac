"""``limit``/``continue`` paging of lists, as the API server's etcd3 storage does it.

Upstream (``staging/src/k8s.io/apiserver/pkg/storage/continue.go`` and ``etcd3/store.go``):
- a page ends after ``limit`` items; its ``continue`` token is base64url (unpadded) JSON
  ``{"v": "meta.k8s.io/v1", "rv": <the first page's resourceVersion>, "start": <last key>"\\x00"}``,
  the key relative to the list's prefix (``<name>`` in a namespace, ``<namespace>/<name>`` across all);
- every later page is read at that resourceVersion (etcd MVCC) from that key on, so the pages
  together are one consistent snapshot: an object deleted or created between pages changes nothing;
- once the snapshot is compacted away the answer is 410 ``Expired`` ("The provided continue
  parameter is too old..."); a token that does not decode is 400 "invalid continue token: ...";
  ``resourceVersion`` together with ``continue`` is 400;
- ``remainingItemCount`` is set only when the list has no selector (upstream's count is of keys).

Departures: upstream answers a token with ``rv`` < 0 (which it issues itself, for an inconsistent
continuation after compaction) with the latest state; this server issues none, so a negative
``rv`` is a forged token and a 400. A token also carries a digest of the list it belongs to
(resource, namespace, selectors): one presented to another list is a 400, where upstream would
silently apply the key to the other list.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import posixpath
from dataclasses import dataclass
from typing import Any

from elastic_training.local.cluster.resources import ApiError, ResourceType, bad_request
from elastic_training.local.cluster.selectors import Selection
from elastic_training.local.cluster.store import Obj, Store

TOKEN_VERSION = "meta.k8s.io/v1"
CONTINUE_EXPIRED = (
    "The provided continue parameter is too old to display a consistent list result. "
    "You can start a new list without the continue parameter."
)


@dataclass(frozen=True)
class ListQuery:
    """What one list request asks for: the type, its selection and the raw selector strings."""

    rtype: ResourceType
    selection: Selection
    label_selector: str = ""
    field_selector: str = ""

    @property
    def binding(self) -> str:
        """A digest of the list a token belongs to."""
        scope = f"{self.rtype}|{self.selection.namespace or ''}|{self.label_selector}|{self.field_selector}"
        return hashlib.sha256(scope.encode()).hexdigest()[:16]

    def key(self, obj: Obj) -> str:
        """An object's key relative to the list's prefix, as etcd orders them."""
        meta = obj["metadata"]
        if self.rtype.namespaced and self.selection.namespace is None:
            return f"{meta.get('namespace', '')}/{meta['name']}"
        return str(meta["name"])


@dataclass(frozen=True)
class Page:
    """One page of a list: its items, the snapshot's resourceVersion, and how to go on."""

    items: list[Obj]
    resource_version: int
    continue_token: str | None = None
    remaining: int | None = None

    def metadata(self) -> dict[str, Any]:
        meta: dict[str, Any] = {"resourceVersion": str(self.resource_version)}
        if self.continue_token:
            meta["continue"] = self.continue_token
            if self.remaining is not None:
                meta["remainingItemCount"] = self.remaining
        return meta


def _invalid_token(why: str) -> ApiError:
    return bad_request(f"invalid continue token: continue key is not valid: {why}")


def encode_token(resource_version: int, start: str, binding: str) -> str:
    """The token for the page that starts at key ``start`` of the snapshot at ``resource_version``."""
    body = {"v": TOKEN_VERSION, "rv": resource_version, "start": start, "list": binding}
    return base64.urlsafe_b64encode(json.dumps(body, separators=(",", ":")).encode()).decode().rstrip("=")


def decode_token(token: str, binding: str) -> tuple[int, str]:
    """(resourceVersion, start key) of a token; ``ApiError`` 400 when it is not one of ours for this list."""
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        body = json.loads(raw)
    except (binascii.Error, ValueError) as exc:
        raise _invalid_token(str(exc)) from exc
    if not isinstance(body, dict):
        raise _invalid_token("not a JSON object")
    if body.get("v") != TOKEN_VERSION:
        raise _invalid_token(f"server does not recognize this encoded version {body.get('v')!r}")
    version, start = body.get("rv"), body.get("start")
    if not isinstance(version, int) or isinstance(version, bool) or version <= 0:
        raise _invalid_token(f"incorrect encoded start resourceVersion (version {TOKEN_VERSION})")
    if not isinstance(start, str) or not start:
        raise _invalid_token(f"encoded start key empty (version {TOKEN_VERSION})")
    rooted = start if start.startswith("/") else "/" + start
    if posixpath.normpath(rooted) != rooted:  # upstream's path.Clean check against key traversal
        raise _invalid_token(start)
    if body.get("list") != binding:
        raise _invalid_token("it was issued for another list (resource, namespace or selectors differ)")
    return version, start.lstrip("/")


def parse_limit(value: str | None) -> int:
    """``limit`` as a page size; 0 (or absent, or negative, as upstream) means no paging."""
    try:
        size = int(value) if value else 0
    except ValueError as exc:
        raise bad_request(f"limit: invalid integer {value!r}") from exc
    return max(size, 0)


def list_page(
    store: Store, query: ListQuery, limit: int, token: str | None, resource_version: str | None = None
) -> Page:
    """One page of ``query``'s list: the first (at the store's current version) or the one ``token`` names."""
    rtype, selection = query.rtype, query.selection
    if token:
        if resource_version not in (None, "", "0"):
            raise bad_request("specifying resource version is not allowed when using continue")
        version, start = decode_token(token, query.binding)
        if version > store.resource_version:
            raise _invalid_token(f"resourceVersion {version} is newer than the server's {store.resource_version}")
        try:
            objects = store.view_at(rtype, selection.namespace, version)
        except ApiError as error:
            if error.code == 410:
                raise ApiError(410, "Expired", CONTINUE_EXPIRED) from error
            raise
    else:
        objects, version = store.view(rtype, selection.namespace)
        start = ""
    if not limit and not token:
        return Page([obj for obj in objects if selection.matches(obj)], version)
    keyed = sorted(((query.key(obj), obj) for obj in objects), key=lambda pair: pair[0])
    after = [(key, obj) for key, obj in keyed if key >= start]
    matching = [(key, obj) for key, obj in after if selection.matches(obj)]
    if not limit or len(matching) <= limit:
        return Page([obj for _, obj in matching], version)
    page = matching[:limit]
    last_key = page[-1][0]
    unfiltered = not query.label_selector and not query.field_selector
    remaining = len(matching) - limit if unfiltered else None
    return Page([obj for _, obj in page], version, encode_token(version, last_key + "\x00", query.binding), remaining)
