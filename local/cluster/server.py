"""The local cluster's Kubernetes API over HTTP (aiohttp), on top of :class:`Store`.

Paths are parsed by hand rather than by routes, as the API server's own path grammar is
ambiguous for a route table (``/api/v1/namespaces/x/status`` versus ``/api/v1/namespaces/x/pods``).
Every error leaves as a Kubernetes ``Status`` body. Creates are admitted, defaulted and validated
by the store for every caller (:mod:`local.cluster.strategy`); updates made here are validated
(:mod:`local.cluster.validation`), the in-process controllers' updates are not.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from aiohttp import web

from elastic_training.local.cluster import discovery, openapi, pod_subresources, server_side_apply, tables
from elastic_training.local.cluster.access import USER_KEY, Access, resource_verb
from elastic_training.local.cluster.audit import AuditEvent, AuditLog
from elastic_training.local.cluster.faults import FaultInjector
from elastic_training.local.cluster.paging import ListQuery, list_page, parse_limit
from elastic_training.local.cluster.patching import apply_patch, check_patch_type
from elastic_training.local.cluster.protobuf import decode_body
from elastic_training.local.cluster.resources import (
    CUSTOM_RESOURCE_TYPES,
    JOBSETS,
    NAMESPACES,
    PODS,
    ApiError,
    ResourceType,
    bad_request,
    invalid,
)
from elastic_training.local.cluster.selectors import Selection, parse_field_selector, parse_label_selector
from elastic_training.local.cluster.store import Obj, Store
from elastic_training.local.cluster.targets import Target, not_found_path, parse_target
from elastic_training.local.cluster.validation import validate, validate_update
from elastic_training.local.cluster.watching import WatchOptions, stream_watch
from elastic_training.local.nodeagent.logs import LogStore
from elastic_training.local.nodeagent.pod_logs import (
    DEFAULT_CONTAINER_ANNOTATION,
    LogRequestError,
    pod_run_finished,
    stream_container_log,
)

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 4 * 1024 * 1024  # the real API server takes up to 3 MiB objects
# Types whose DELETE returns the object rather than a Status once it is gone (as the real registries do).
_DELETE_RETURNS_OBJECT = (PODS, JOBSETS)
_UNDELETABLE_NAMESPACES = ("default", "kube-system", "kube-public")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class ApiServer:
    """The request handlers, bound to one store, log store and fault injector."""

    def __init__(
        self,
        store: Store,
        logs: LogStore,
        faults: FaultInjector,
        token: str | None,
        watch_options: WatchOptions | None = None,
    ) -> None:
        self.store = store
        self.watch_options = watch_options or WatchOptions()
        self.logs = logs
        self.faults = faults
        self.token = token
        self.access = Access(store, token)
        self.audit = AuditLog()

    def app(self) -> web.Application:
        """A fresh aiohttp application serving this API."""
        app = web.Application(
            middlewares=[self._errors, self._authenticate, self.faults.api.middleware()],
            client_max_size=MAX_BODY_BYTES,
        )
        for path in ("/version", "/version/"):
            app.router.add_get(path, self._version)
        for path in ("/healthz", "/readyz", "/livez"):
            app.router.add_get(path, self._healthy)
        for path in ("/api", "/api/"):
            app.router.add_get(path, self._core_versions)
        for path in ("/apis", "/apis/"):
            app.router.add_get(path, self._group_list)
        app.router.add_get(openapi.PREFIX, self._openapi_index)
        app.router.add_get(openapi.PREFIX + "/{tail:.+}", self._openapi_document)
        self.faults.add_routes(app)
        app.router.add_route("*", "/api/{tail:.*}", self._core)
        app.router.add_route("*", "/apis/{tail:.*}", self._grouped)
        return app

    # -- middlewares -------------------------------------------------------------------------

    @web.middleware
    async def _errors(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            return await handler(request)
        except ApiError as error:
            return _status(error)
        except web.HTTPException as exc:
            if exc.status == 405:
                return _status(ApiError(405, "MethodNotAllowed", f"{request.method} is not supported on this path"))
            if exc.status == 404:
                return _status(not_found_path(request.path))
            raise
        except Exception:
            log.exception("internal error serving %s %s", request.method, request.path)
            return _status(ApiError(500, "InternalError", f"internal error serving {request.method} {request.path}"))

    @web.middleware
    async def _authenticate(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        self.access.admit(request)  # identity, impersonation, and RBAC for non-resource paths
        return await handler(request)

    def _audit(self, request: web.Request, target: Target) -> None:
        """Record the request at ``RequestReceived``, as the audit filter does before authorization."""
        user = request.get(USER_KEY)
        watch = request.query.get("watch", "").lower() in ("true", "1")
        event = AuditEvent(
            verb=resource_verb(request.method, target, watch),
            api_group=target.rtype.group,
            resource=target.rtype.plural,
            namespace=target.namespace,
            name=target.name,
            subresource=target.subresource,
            username=user.name if user is not None else "",
            user_agent=request.headers.get("User-Agent", ""),
            request_uri=str(request.rel_url),
            received_at=time.time(),
        )
        self.audit.record(event)

    # -- discovery ---------------------------------------------------------------------------

    async def _version(self, request: web.Request) -> web.Response:
        return web.json_response(discovery.version_info())

    async def _healthy(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def _core_versions(self, request: web.Request) -> web.Response:
        return web.json_response(discovery.core_versions(request.host))

    async def _group_list(self, request: web.Request) -> web.Response:
        return web.json_response(discovery.api_group_list())

    async def _openapi_index(self, request: web.Request) -> web.Response:
        return web.json_response(openapi.index())

    async def _openapi_document(self, request: web.Request) -> web.Response:
        body = openapi.document(request.match_info["tail"])
        if body is None:
            raise not_found_path(request.path)
        return web.Response(body=body, content_type="application/json")

    async def _core(self, request: web.Request) -> web.StreamResponse:
        parts = [p for p in request.match_info["tail"].split("/") if p]
        if not parts:
            return await self._core_versions(request)
        return await self._dispatch(request, "", parts[0], parts[1:])

    async def _grouped(self, request: web.Request) -> web.StreamResponse:
        parts = [p for p in request.match_info["tail"].split("/") if p]
        if not parts:
            return await self._group_list(request)
        if len(parts) == 1:
            group = discovery.api_group(parts[0])
            if group is None:
                raise not_found_path(request.path)
            return web.json_response(group)
        return await self._dispatch(request, parts[0], parts[1], parts[2:])

    async def _dispatch(self, request: web.Request, group: str, version: str, rest: list[str]) -> web.StreamResponse:
        if not rest:
            resources = discovery.api_resource_list(group, version)
            if resources is None:
                raise not_found_path(request.path)
            return web.json_response(resources)
        target = parse_target(group, version, rest, request.path)
        self._audit(request, target)
        self.access.authorize(request, target)
        answered = await self.access.serve(request, target)
        if answered is not None:
            return answered
        method = request.method
        if target.name is None:
            if method == "GET":
                return await self._list(request, target)
            if method == "POST" and (target.namespace is not None or not target.rtype.namespaced):
                return await self._create(request, target)
            if method == "DELETE" and target.namespace is not None:
                return await self._delete_collection(request, target)
        elif target.subresource == "finalize" and target.rtype == NAMESPACES:
            if method == "PUT":
                return await self._replace(request, target)
        elif target.subresource is None or (target.subresource == "status" and target.rtype.has_status):
            if method == "GET":
                return _respond(request, target.rtype, [self._get(target)])
            if method == "PUT":
                return await self._replace(request, target)
            if method == "PATCH":
                return await self._patch(request, target)
            if method == "DELETE" and target.subresource is None:
                return await self._delete(request, target)
        elif target.subresource in ("binding", "eviction") and target.rtype == PODS:
            if method == "POST":
                assert target.namespace is not None and target.name is not None
                body = decode_body(await request.read(), request.content_type)
                act = pod_subresources.bind if target.subresource == "binding" else pod_subresources.evict
                return _json(act(self.store, target.namespace, target.name, body), status=201)
        elif target.subresource == "log" and target.rtype == PODS:
            if method == "GET":
                assert target.namespace is not None
                return await serve_pod_log(request, self.store, self.logs, target.namespace, target.name)
        else:
            raise not_found_path(request.path)
        raise ApiError(405, "MethodNotAllowed", f"{method} is not supported on {request.path}")

    # -- verbs -------------------------------------------------------------------------------

    def _ns(self, target: Target) -> str:
        return target.namespace or "" if target.rtype.namespaced else ""

    def _get(self, target: Target) -> Obj:
        assert target.name is not None
        return self.store.get(target.rtype, self._ns(target), target.name)

    async def _list(self, request: web.Request, target: Target) -> web.StreamResponse:
        query = request.query
        rtype = target.rtype
        labels, fields = query.get("labelSelector", ""), query.get("fieldSelector", "")
        selection = Selection(
            namespace=target.namespace if rtype.namespaced else None,
            labels=parse_label_selector(labels),
            fields=parse_field_selector(fields, rtype),
        )
        if query.get("watch", "").lower() in ("true", "1"):
            table = tables.negotiate(request.headers.get("Accept"), query.get("includeObject"))
            render = None if table is None else (lambda obj: tables.to_table(rtype, [obj], table))
            return await stream_watch(request, self.store, rtype, selection, self.watch_options, render)
        page = list_page(
            self.store,
            ListQuery(rtype, selection, labels, fields),
            parse_limit(query.get("limit")),
            query.get("continue"),
            query.get("resourceVersion"),
        )
        body = {
            "kind": rtype.list_kind,
            "apiVersion": rtype.api_version,
            "metadata": page.metadata(),
            "items": page.items,
        }
        return _respond(request, rtype, page.items, body)

    async def _create(self, request: web.Request, target: Target) -> web.Response:
        _reject_dry_run(request)
        rtype = target.rtype
        body = await _object_body(request, rtype)
        openapi.check_field_validation(request.query.get("fieldValidation"), rtype, body)
        return self._insert(target, body)

    def _insert(self, target: Target, body: Obj) -> web.Response:
        """Store a new object (create, or server-side apply of an object that does not exist)."""
        rtype = target.rtype
        namespace = target.namespace if rtype.namespaced else None
        # Admission, defaults, status reset and validation happen in the store, for controllers too.
        return _json(self.store.create(rtype, body, namespace), status=201)

    async def _replace(self, request: web.Request, target: Target) -> web.Response:
        _reject_dry_run(request)
        rtype = target.rtype
        body = await _object_body(request, rtype)
        openapi.check_field_validation(request.query.get("fieldValidation"), rtype, body)
        meta = body.setdefault("metadata", {})
        if meta.get("name") not in (None, target.name):
            raise bad_request(
                f"the name of the object ({meta['name']}) does not match the name on the URL ({target.name})"
            )
        meta["name"] = target.name
        return _json(self._write(target, body))

    async def _patch(self, request: web.Request, target: Target) -> web.Response:
        _reject_dry_run(request)
        if request.content_type == server_side_apply.APPLY_PATCH:
            return await self._apply(request, target)
        custom = target.rtype in CUSTOM_RESOURCE_TYPES
        check_patch_type(request.content_type, custom=custom)
        try:
            patch = json.loads(await request.read())
        except ValueError as exc:
            raise bad_request(f"the patch is not JSON: {exc}") from exc
        current = self._get(target)
        patched = apply_patch(request.content_type, current, patch, custom=custom)
        openapi.check_field_validation(request.query.get("fieldValidation"), target.rtype, patched)
        meta = patched.get("metadata")
        if not isinstance(meta, dict) or meta.get("name") != target.name:
            raise bad_request("a patch may not change metadata.name")
        if target.rtype.namespaced and meta.get("namespace") != target.namespace:
            raise bad_request("a patch may not change metadata.namespace")
        return _json(self._write(target, patched))

    async def _apply(self, request: web.Request, target: Target) -> web.Response:
        """Server-side apply: merge the applied configuration in, or create the object from it."""
        rtype = target.rtype
        if target.subresource is not None:
            raise ApiError(415, "UnsupportedMediaType", "server-side apply to a subresource is not supported here")
        applied = server_side_apply.parse_applied(await request.read(), rtype, target.name)
        namespace = (applied.get("metadata") or {}).get("namespace")
        if rtype.namespaced and namespace not in (None, target.namespace):
            raise bad_request(
                f"the namespace of the object ({namespace}) does not match the namespace on the request "
                f"({target.namespace})"
            )
        openapi.check_field_validation(request.query.get("fieldValidation"), rtype, applied)
        live = self.store.find(rtype, self._ns(target), str(target.name))
        force = request.query.get("force", "").lower() == "true"
        merged = server_side_apply.apply(live, applied, request.query.get("fieldManager", ""), force, rtype)
        if live is None:
            return self._insert(target, merged)
        return _json(self._write(target, merged))

    def _write(self, target: Target, obj: Obj) -> Obj:
        """Validate and store an update of the object or its status."""
        rtype = target.rtype
        current = self._get(target)
        if target.subresource is None:
            causes = validate(rtype, obj) + validate_update(rtype, current, obj)
            if causes:
                raise invalid(rtype, str(target.name), causes)
        return self.store.update(rtype, obj, subresource=target.subresource, namespace=self._ns(target) or None)

    async def _delete(self, request: web.Request, target: Target) -> web.Response:
        _reject_dry_run(request)
        assert target.name is not None
        options = await _delete_options(request)
        rtype, namespace = target.rtype, self._ns(target)
        current = self._get(target)
        preconditions = options.get("preconditions") or {}
        if preconditions.get("uid") not in (None, current["metadata"]["uid"]):
            raise ApiError(409, "Conflict", f"Precondition failed: UID in precondition: {preconditions['uid']}")
        if preconditions.get("resourceVersion") not in (None, current["metadata"]["resourceVersion"]):
            raise ApiError(409, "Conflict", "Precondition failed: resourceVersion in precondition does not match")
        if rtype == NAMESPACES and target.name in _UNDELETABLE_NAMESPACES:
            raise ApiError(
                403, "Forbidden", f'namespaces "{target.name}" is forbidden: this namespace may not be deleted'
            )
        result = self.store.delete(
            rtype,
            namespace,
            target.name,
            propagation_policy=options.get("propagationPolicy"),
            grace_period_seconds=options.get("gracePeriodSeconds"),
        )
        if self.store.find(rtype, namespace, target.name) is not None:
            # handlers/delete.go: 200 with the object while deletion goes on (graceful, finalizers,
            # a terminating namespace); 202 only when the client set orphanDependents=false.
            return _json(result, status=202 if options.get("orphanDependents") is False else 200)
        if rtype in _DELETE_RETURNS_OBJECT:
            return _json(result)
        return _json(_success(rtype, target.name, result["metadata"].get("uid", "")))

    async def _delete_collection(self, request: web.Request, target: Target) -> web.Response:
        _reject_dry_run(request)
        options = await _delete_options(request)
        rtype, namespace = target.rtype, str(target.namespace)
        selection = Selection(
            namespace=namespace,
            labels=parse_label_selector(request.query.get("labelSelector")),
            fields=parse_field_selector(request.query.get("fieldSelector"), rtype),
        )
        items, _ = self.store.list(rtype, namespace)
        deleted = []
        for obj in items:
            if not selection.matches(obj) or self.store.find(rtype, namespace, obj["metadata"]["name"]) is None:
                continue
            deleted.append(
                self.store.delete(
                    rtype,
                    namespace,
                    obj["metadata"]["name"],
                    propagation_policy=options.get("propagationPolicy"),
                    grace_period_seconds=options.get("gracePeriodSeconds"),
                )
            )
        _, version = self.store.list(rtype, namespace)
        metadata = {"resourceVersion": str(version)}
        return _json({"kind": rtype.list_kind, "apiVersion": rtype.api_version, "metadata": metadata, "items": deleted})


# -- helpers -----------------------------------------------------------------------------------


def _json(body: Any, status: int = 200) -> web.Response:
    return web.Response(
        body=json.dumps(body, separators=(",", ":")).encode(), status=status, content_type="application/json"
    )


def _respond(request: web.Request, rtype: ResourceType, items: list[Obj], body: Obj | None = None) -> web.Response:
    """One object (``body`` None) or a list ``body``, as JSON or as the ``Table`` the Accept header asks for."""
    table = tables.negotiate(request.headers.get("Accept"), request.query.get("includeObject"))
    if table is not None:
        metadata = (body or {}).get("metadata") or {"resourceVersion": items[0]["metadata"].get("resourceVersion", "")}
        return _json(tables.to_table(rtype, items, table, metadata))
    return _json(body if body is not None else items[0])


def _status(error: ApiError) -> web.Response:
    return _json(error.status_body(), status=error.code)


def _success(rtype: ResourceType, name: str, uid: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": {"name": name, "group": rtype.group, "kind": rtype.plural, "uid": uid},
    }


def _reject_dry_run(request: web.Request) -> None:
    if request.query.get("dryRun"):
        raise bad_request("dryRun is not supported by the local cluster")


async def _object_body(request: web.Request, rtype: ResourceType) -> Obj:
    body = decode_body(await request.read(), request.content_type)
    if not isinstance(body, dict):
        raise bad_request("the request body must be a JSON object")
    if body.get("kind") not in (None, "", rtype.kind):
        raise bad_request(f"the kind in the body ({body['kind']}) does not match the resource ({rtype.kind})")
    if body.get("apiVersion") not in (None, "", rtype.api_version):
        raise bad_request(
            f"the API version in the data ({body['apiVersion']}) does not match the expected API version "
            f"({rtype.api_version})"
        )
    if not isinstance(body.get("metadata", {}), dict):
        raise bad_request("metadata must be an object")
    return body


async def _delete_options(request: web.Request) -> dict[str, Any]:
    """``DeleteOptions`` from the body and/or the query string (the query wins)."""
    options: dict[str, Any] = {}
    if request.can_read_body:
        raw = await request.read()
        if raw.strip():
            try:
                parsed = json.loads(raw)
            except ValueError as exc:
                raise bad_request(f"the DeleteOptions body is not JSON: {exc}") from exc
            if not isinstance(parsed, dict):
                raise bad_request("DeleteOptions must be a JSON object")
            options.update(parsed)
    query = request.query
    if "propagationPolicy" in query:
        options["propagationPolicy"] = query["propagationPolicy"]
    if "gracePeriodSeconds" in query:
        options["gracePeriodSeconds"] = query["gracePeriodSeconds"]
    if "orphanDependents" in query:
        options["orphanDependents"] = query["orphanDependents"].lower() == "true"
    if options.get("orphanDependents") is True:
        options.setdefault("propagationPolicy", "Orphan")
    grace = options.get("gracePeriodSeconds")
    if grace is not None:
        try:
            options["gracePeriodSeconds"] = int(grace)
        except (TypeError, ValueError) as exc:
            raise bad_request(f"gracePeriodSeconds: invalid integer {grace!r}") from exc
        if options["gracePeriodSeconds"] < 0:
            options["gracePeriodSeconds"] = 1  # rest.BeforeDelete: a negative grace period means 1 s
    return options


# The imitation's log request (deleted with it): the pod from its store, then the node agent's log streaming.
def choose_container(pod: Mapping[str, Any], requested: str | None) -> str:
    """The container to read; 400 when it is ambiguous or unknown, as on the real server."""
    spec = pod.get("spec") or {}
    name = pod["metadata"]["name"]
    main = [c.get("name") for c in spec.get("containers") or []]
    init = [c.get("name") for c in spec.get("initContainers") or []]
    if requested is None:
        default = (pod["metadata"].get("annotations") or {}).get(DEFAULT_CONTAINER_ANNOTATION)
        if default in main:
            return str(default)
        if len(main) == 1:
            return str(main[0])
        message = f"a container name must be specified for pod {name}, choose one of: [{' '.join(main)}]"
        if init:
            message += f" or one of the init containers: [{' '.join(init)}]"
        raise bad_request(message)
    if requested not in main and requested not in init:
        raise bad_request(f"container {requested} is not valid for pod {name}")
    return requested


def run_finished(store: Store, namespace: str, name: str, uid: str, container: str, run: int) -> bool:
    """Whether run ``run`` of ``container`` can print no more: terminated, replaced, or its pod gone."""
    return pod_run_finished(store.find(PODS, namespace, name), uid, container, run)


async def serve_pod_log(
    request: web.Request, store: Store, logs: LogStore, namespace: str, name: str
) -> web.StreamResponse:
    """Answer one log request (plain text, streamed in chunks; until the run ends when ``follow``)."""
    pod = store.get(PODS, namespace, name)
    container = choose_container(pod, request.query.get("container"))
    uid = pod["metadata"]["uid"]
    try:
        return await stream_container_log(
            request, logs, pod, container, lambda run: run_finished(store, namespace, name, uid, container, run)
        )
    except LogRequestError as error:
        raise bad_request(str(error)) from error
