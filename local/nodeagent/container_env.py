"""A container's environment and command line, resolved the way the kubelet resolves them.

- ``env`` entries are taken in order; each ``value`` is expanded with ``$(VAR)`` against the
  variables defined before it and the service variables (here: the cluster's ``pod_env``);
- ``valueFrom.fieldRef`` reads the pod (downward API);
- ``command`` and ``args`` are expanded against the container's whole environment;
- ``$$`` is an escaped ``$``; a reference to an undefined variable is left as written.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from elastic_training.local.kube_objects import Obj

_LABEL_REF = re.compile(r"^metadata\.(labels|annotations)\['([^']*)'\]$")


class ContainerConfigError(ValueError):
    """The container cannot be configured (the kubelet's ``CreateContainerConfigError``)."""


def expand(text: str, lookup: Callable[[str], str | None]) -> str:
    """Kubernetes' ``$(VAR)`` expansion (k8s.io/kubernetes third_party/forked/golang/expansion)."""
    out: list[str] = []
    checkpoint = 0
    cursor = 0
    while cursor < len(text):
        if text[cursor] == "$" and cursor + 1 < len(text):
            out.append(text[checkpoint:cursor])
            rest = text[cursor + 1 :]
            if rest[0] == "$":
                out.append("$")
                advance = 1
            elif rest[0] == "(":
                close = rest.find(")", 1)
                if close == -1:
                    out.append("$(")
                    advance = 1
                else:
                    name = rest[1:close]
                    value = lookup(name)
                    out.append(value if value is not None else f"$({name})")
                    advance = close + 1
            else:
                out.append("$" + rest[0])
                advance = 1
            cursor += advance
            checkpoint = cursor + 1
        cursor += 1
    out.append(text[checkpoint:])
    return "".join(out)


def field_value(pod: Obj, field_path: str) -> str:
    """The value of a downward-API ``fieldRef`` path for ``pod``."""
    meta = pod.get("metadata", {})
    spec = pod.get("spec", {})
    status = pod.get("status", {})
    simple: dict[str, Any] = {
        "metadata.name": meta.get("name"),
        "metadata.namespace": meta.get("namespace"),
        "metadata.uid": meta.get("uid"),
        "spec.nodeName": spec.get("nodeName"),
        "spec.serviceAccountName": spec.get("serviceAccountName"),
        "status.hostIP": status.get("hostIP"),
        "status.podIP": status.get("podIP"),
    }
    if field_path in simple:
        return str(simple[field_path] or "")
    if field_path in ("status.hostIPs", "status.podIPs"):
        key = field_path.split(".", 1)[1]
        return ",".join(str(entry.get("ip", "")) for entry in status.get(key) or [])
    match = _LABEL_REF.match(field_path)
    if match:
        return str((meta.get(match.group(1)) or {}).get(match.group(2), ""))
    raise ContainerConfigError(f"unsupported fieldRef fieldPath {field_path!r}")


def container_env(pod: Obj, container: Obj, base: Mapping[str, str], service_env: Mapping[str, str]) -> dict[str, str]:
    """The environment of one container: ``base`` (PATH, HOSTNAME, ...), then service vars, then ``env``."""
    env = dict(base)
    env.update(service_env)
    defined: dict[str, str] = {}

    def lookup(name: str) -> str | None:
        if name in defined:
            return defined[name]
        return service_env.get(name)

    for entry in container.get("env") or []:
        name = str(entry.get("name", ""))
        if "value" in entry or "valueFrom" not in entry:
            value = expand(str(entry.get("value") or ""), lookup)
        else:
            source = entry["valueFrom"] or {}
            if "fieldRef" in source:
                value = field_value(pod, str(source["fieldRef"].get("fieldPath", "")))
            else:
                kinds = ", ".join(sorted(source)) or "nothing"
                raise ContainerConfigError(f"env {name}: valueFrom {kinds} is not supported by the local cluster")
        defined[name] = value
        env[name] = value
    return env


def container_argv(container: Obj, env: Mapping[str, str]) -> list[str]:
    """``command`` + ``args`` with ``$(VAR)`` expanded against the container's environment."""
    lookup = env.get
    command = [expand(str(part), lookup) for part in container.get("command") or []]
    args = [expand(str(part), lookup) for part in container.get("args") or []]
    return command + args
