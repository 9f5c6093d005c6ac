"""``elastic-training cluster``: run the local cluster in the foreground, or inject faults into a running one.

elastic-training cluster up --kubeconfig ./kubeconfig [--port N] [--workdir DIR] [--api-only]
                           [--description v5e-small|single-node|FILE]
elastic-training cluster fault --kubeconfig ./kubeconfig delete-pod default trainer-worker-0-0-abcde
elastic-training cluster fault --kubeconfig ./kubeconfig fail-requests --code 429 --count 3 --path jobsets
elastic-training cluster fault --kubeconfig ./kubeconfig lose-host gke-local-tpu-v5e-16-0-2 --repair-seconds 60
elastic-training cluster fault --kubeconfig ./kubeconfig provision-on-demand tpu-v5e-16-3 --seconds 20
elastic-training cluster fault --kubeconfig ./kubeconfig stop-queue --cluster-queue cluster-queue --policy HoldAndDrain
elastic-training cluster fault --kubeconfig ./kubeconfig deactivate-workload default my-run-jobset
elastic-training cluster fault --kubeconfig ./kubeconfig kueue-configuration kueue-config.yaml   # waitForPodsReady
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from elastic_training.cli.supervisor import SignalRelay

if TYPE_CHECKING:
    from elastic_training.local.kubeconfig import Endpoint

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2


def _bounded(kind: Callable[[str], float], low: float, high: float, name: str) -> Callable[[str], Any]:
    """An argparse type: ``kind(text)`` within [low, high]; argparse names ``name`` in its error."""

    def parse(text: str) -> Any:
        value = kind(text)
        if not low <= value <= high:  # also false for nan
            raise ValueError(text)
        return value

    parse.__name__ = name  # "argument --port: invalid port (0-65535) value: '70000'"
    return parse


_port = _bounded(int, 0, 65535, "port (0-65535)")
_positive = _bounded(int, 1, sys.maxsize, "positive integer")
_error_code = _bounded(int, 400, 599, "HTTP error status (400-599)")
_probability = _bounded(float, 0.0, 1.0, "probability (0-1)")
_seconds = _bounded(float, 0.0, 600.0, "seconds (0-600)")
_repair_seconds = _bounded(float, 0.0, 86400.0, "seconds (0-86400)")
_burst_seconds = _bounded(float, 0.001, 3600.0, "seconds (over 0, up to 3600)")
_retry_after = _bounded(int, 0, 600, "seconds (0-600)")


def _yaml_mapping(path: str) -> dict[str, Any]:
    """A YAML file holding a mapping ('-': an empty one)."""
    if path == "-":
        return {}
    import yaml

    try:
        loaded = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise argparse.ArgumentTypeError(f"cannot read {path}: {exc}") from exc
    if loaded is None:
        return {}
    if not isinstance(loaded, dict):
        raise argparse.ArgumentTypeError(f"{path} is not a YAML mapping (a Kueue Configuration)")
    return loaded


def _regex(text: str) -> str:
    import re

    try:
        re.compile(text)
    except re.error as exc:
        raise ValueError(text) from exc
    return text


def _signal(text: str) -> str:
    import signal

    name = text.upper()
    try:
        if name.isdigit():
            signal.Signals(int(name))
        else:
            signal.Signals[name if name.startswith("SIG") else f"SIG{name}"]
    except (KeyError, ValueError) as exc:
        raise ValueError(text) from exc
    return text


_regex.__name__ = "regular expression"
_signal.__name__ = "signal"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``cluster up`` and ``cluster fault ...`` subcommands."""
    verbs = parser.add_subparsers(dest="cluster_command", required=True, metavar="{up,fault}")
    _up_arguments(verbs)
    fault = verbs.add_parser("fault", help="inject a fault into a running local cluster")
    fault.add_argument("--kubeconfig", type=Path, required=True, help="the kubeconfig `cluster up` wrote")
    kinds = fault.add_subparsers(dest="fault", required=True, metavar="FAULT")
    _pod_faults(kinds)
    _api_faults(kinds)
    _node_faults(kinds)
    _kueue_faults(kinds)


def _up_arguments(verbs: Any) -> None:
    up = verbs.add_parser("up", help="serve a Kubernetes API on 127.0.0.1 in the foreground until SIGINT/SIGTERM")
    up.add_argument("--kubeconfig", type=Path, required=True, help="where to write the kubeconfig")
    up.add_argument("--port", type=_port, default=0, help="kube-apiserver's port on 127.0.0.1 (default 0: any free)")
    up.add_argument(
        "--workdir", type=Path, help="logs, certificates, etcd's data, pods' files (default: a new temp dir)"
    )
    up.add_argument(
        "--api-only", action="store_true", help="the control plane without the node agent: no nodes, pods stay Pending"
    )
    up.add_argument(
        "--description",
        default="v5e-small",
        help="the node pools: a cluster description YAML file, or a built-in name: v5e-small (default: four "
        "v5e-16 slices of 4 hosts, the single-host v5e 2x2 pool tpu-v5e-4 and the CPU pool cpu-np) or "
        "single-node (one untainted node local-node)",
    )
    up.add_argument(
        "--watch-history",
        action=_Retired,
        help_text="kube-apiserver sizes its own watch cache and etcd's compaction decides a watch's 410 Gone "
        "(`cluster fault expire-watches --compact` compacts it now)",
    )


def _pod_faults(kinds: Any) -> None:
    delete = kinds.add_parser("delete-pod", help="delete a pod through the API (its grace period), as kubectl does")
    delete.add_argument("namespace")
    delete.add_argument("name")
    sig = kinds.add_parser("signal-pod", help="send a signal to a pod's container processes")
    sig.add_argument("namespace")
    sig.add_argument("name")
    sig.add_argument("--signal", type=_signal, default="SIGKILL", help="KILL, SIGTERM, 9, ... (default SIGKILL)")
    sig.add_argument("--container", help="only this container (default: every container)")
    evict = kinds.add_parser("evict-pod", help="evict a pod through the Eviction API (DisruptionTarget, then deleted)")
    evict.add_argument("namespace")
    evict.add_argument("name")
    evict.add_argument(
        "--reason",
        choices=("EvictionByEvictionAPI", "PreemptionByScheduler", "TerminationByKubelet", "DeletionByPodGC"),
        default="EvictionByEvictionAPI",
        help="the DisruptionTarget reason (default EvictionByEvictionAPI; on the upstream cluster only it: the "
        "others are the scheduler's, the kubelet's and pod GC's own)",
    )


def _api_faults(kinds: Any) -> None:
    fail = kinds.add_parser("fail-requests", help="answer matching API requests with an error status")
    fail.add_argument("--code", type=_error_code, default=500, help="the status to answer with (default 500)")
    how_many = fail.add_mutually_exclusive_group()
    how_many.add_argument("--count", type=_positive, help="fail only the next N matching requests")
    how_many.add_argument("--probability", type=_probability, help="fail each matching request with this probability")
    fail.add_argument("--seconds", type=_burst_seconds, help="only for this long from now (a burst bounded in time)")
    fail.add_argument("--retry-after", type=_retry_after, help="a 429's Retry-After, in seconds (default 1)")
    fail.add_argument("--path", type=_regex, help="regular expression searched in the request path")
    fail.add_argument("--method", help="only this HTTP method")
    latency = kinds.add_parser("latency", help="delay matching API requests")
    latency.add_argument("--seconds", type=_seconds, required=True, help="delay added to each matching request")
    latency.add_argument("--path", type=_regex, help="regular expression searched in the request path")
    latency.add_argument("--method", help="only this HTTP method")
    expire = kinds.add_parser("expire-watches", help="end every open watch")
    expire.add_argument("--compact", action="store_true", help="also compact etcd to its newest revision")
    kinds.add_parser("clear", help="remove every API fault rule")
    kinds.add_parser("show", help="print the active API fault rules")


def _node_faults(kinds: Any) -> None:
    lose = kinds.add_parser(
        "lose-host", help="a TPU host is lost with its slice: its node pool's hosts stop until repaired"
    )
    lose.add_argument("node")
    lose.add_argument(
        "--repair-seconds",
        type=_repair_seconds,
        default=None,
        help="how long the pool stays NotReady (default: the pool's repairSeconds in the cluster description, else 0)",
    )
    repair = kinds.add_parser("repair-node-pool", help="GKE auto-repair: drain a node pool, NotReady for a while")
    repair.add_argument("node_pool")
    repair.add_argument("--seconds", type=_repair_seconds, required=True, help="how long the pool stays NotReady")
    provision = kinds.add_parser(
        "provision-on-demand",
        help="take an idle node pool's nodes away; they come back --seconds after a pending pod needs them",
    )
    provision.add_argument("node_pool")
    provision.add_argument(
        "--seconds", type=_repair_seconds, required=True, help="provisioning time once a pod asks for the pool"
    )


def _kueue_faults(kinds: Any) -> None:
    stop = kinds.add_parser(
        "stop-queue", help="a Kueue queue's stopPolicy (HoldAndDrain evicts its admitted Workloads)"
    )
    queue = stop.add_mutually_exclusive_group(required=True)
    queue.add_argument("--cluster-queue", help="a ClusterQueue by name")
    queue.add_argument("--local-queue", help="a LocalQueue as NAMESPACE/NAME")
    stop.add_argument("--policy", choices=("Hold", "HoldAndDrain", "None"), default="HoldAndDrain")
    deactivate = kinds.add_parser("deactivate-workload", help="spec.active=false on a JobSet's Kueue Workload")
    deactivate.add_argument("namespace")
    deactivate.add_argument("jobset")
    deactivate.add_argument("--activate", action="store_true", help="set it true again (Kueue requeues it)")
    configure = kinds.add_parser(
        "kueue-configuration", help="Kueue's manager Configuration (waitForPodsReady), as an edited ConfigMap"
    )
    configure.add_argument("file", type=_yaml_mapping, help="a YAML Kueue Configuration; '-' for none (off)")


def run(args: argparse.Namespace) -> int:
    if args.cluster_command == "up":
        return _up(args)
    return _fault(args)


class _Stopped(Exception):
    """A stop signal (SIGINT, SIGTERM) came while the cluster was starting."""


class _Retired(argparse.Action):
    """A flag of the imitation that the upstream control plane has no use for: refused, with why."""

    def __init__(self, option_strings: list[str], dest: str, help_text: str = "", **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs="?", help=argparse.SUPPRESS, **kwargs)
        self.help_text = help_text

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, *_: Any) -> None:
        parser.error(f"{self.option_strings[0]} is retired: {self.help_text}")


def _up(args: argparse.Namespace) -> int:
    import signal
    import tempfile

    from elastic_training.local.descriptions.cluster_description import DescriptionError, load_description
    from elastic_training.local.upstream_cluster import UpstreamCluster

    try:
        description = load_description(args.description)
    except DescriptionError as exc:
        return _error(str(exc))
    problem = _up_problem(args)  # before anything starts: a refusal leaves nothing running and nothing written
    if problem is not None:
        return _error(problem)
    stop, up = threading.Event(), threading.Event()  # up: set once the cluster serves
    signalled: list[int] = []  # the handler's own record: the Event is set on another thread, a moment later
    relay = SignalRelay(stop)

    def on_signal(signum: int, frame: Any) -> None:
        first = not signalled
        signalled.append(signum)
        relay()
        if first and not up.is_set():  # a second signal does not interrupt the clean-up the first began
            raise _Stopped(signal.Signals(signum).name)  # unwinds the start, which stops what it started

    previous = {signum: signal.signal(signum, on_signal) for signum in (signal.SIGINT, signal.SIGTERM)}
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="elastic-training-cluster-"))
    try:
        cluster = UpstreamCluster(
            workdir,
            args.port,
            kubeconfig_path=args.kubeconfig,
            description=description,
            run_nodes=not args.api_only,
            progress=lambda line: print(line, flush=True),
        )
        return _serve(cluster, workdir, stop, up)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _serve(cluster: Any, workdir: Path, stop: threading.Event, up: threading.Event) -> int:
    """Start ``cluster``, print the banner, serve until ``stop``; every process is stopped on the way out."""
    from elastic_training.local.controlplane.binaries import BuildError
    from elastic_training.local.controlplane.processes import ProcessError
    from elastic_training.local.nodeagent.agent import NodeAgentError

    try:
        cluster.start()  # a failed or interrupted start stops what it started and removes the kubeconfig
        up.set()
    except (BuildError, ProcessError, NodeAgentError, OSError) as exc:
        return _error(f"the cluster did not start: {exc}")
    except _Stopped as stopped:
        cluster.stop()  # the signal may land after start() returned: stop is idempotent
        _stop_children()
        print(f"stopped by {stopped} before the cluster was up; nothing left running", flush=True)
        return EXIT_FAILED
    try:
        _banner(cluster, workdir)
        stop.wait()
        print("stopping: ending every pod process, then the control plane", flush=True)
    finally:
        cluster.stop()
    return EXIT_OK


def _stop_children() -> None:
    """Kill what this process started and no longer holds: a signal that lands inside ``subprocess.Popen``, after
    the fork and before it returns, leaves a component running with no handle to stop it. Each leads its own
    session (``start_new_session``), so its group goes with it. Linux's /proc; elsewhere nothing is found."""
    import contextlib
    import os
    import signal

    for entry in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = entry.read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) == os.getpid() and fields[0] != "Z":
                pid = int(entry.parent.name)
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pid, signal.SIGKILL)  # a component and what it started
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)  # a child in this process's own group (kubectl)


def _up_problem(args: argparse.Namespace) -> str | None:
    """Why ``cluster up`` cannot serve as asked (None: it can): checked without starting or writing anything."""
    from elastic_training.local.controlplane.processes import listening

    if args.port and listening(args.port):
        return f"port {args.port} on 127.0.0.1 is already in use"
    if args.workdir is not None and (why := _unwritable(args.workdir, directory=True)):
        return f"cannot write the cluster's files in {args.workdir}: {why}"
    if why := _unwritable(args.kubeconfig, directory=False):
        return f"cannot write the kubeconfig {args.kubeconfig}: {why}"
    return None


def _unwritable(path: Path, *, directory: bool) -> str | None:
    """Why ``path`` (a folder to fill, or a file to replace atomically) cannot be written; None when it can."""
    import os

    try:
        if path.exists() and path.is_dir() != directory:
            return "it is a directory" if path.is_dir() else "it is not a directory"
        folder = path if directory else path.parent
        while not folder.exists() and folder != folder.parent:  # made with its parents: the first that exists
            folder = folder.parent
        if not folder.is_dir():
            return f"{folder} is not a directory"
        if not os.access(folder, os.W_OK | os.X_OK):
            return f"{folder} is not writable"
    except (OSError, ValueError) as exc:  # ValueError: an embedded NUL
        return str(exc)
    return None


def _banner(cluster: Any, workdir: Path) -> None:
    print(f"serving a Kubernetes API on {cluster.url} (kube-apiserver)", flush=True)
    print(f"kubeconfig: {cluster.kubeconfig_path.resolve()}", flush=True)
    print(f"CA certificate: {cluster.ca_path.resolve()}", flush=True)
    print(f"workdir: {workdir.resolve()}", flush=True)
    print(
        f"faults and the API fault proxy: https://127.0.0.1:{cluster.faults_port} (context "
        "elastic-training-local-faults)",
        flush=True,
    )


def _fault(args: argparse.Namespace) -> int:
    import yaml

    from elastic_training.local.kubeconfig import read_endpoint

    try:
        endpoint = read_endpoint(args.kubeconfig, faults=True)
    except (OSError, ValueError, yaml.YAMLError) as exc:
        return _error(f"cannot read the kubeconfig {args.kubeconfig}: {exc}")
    except (AttributeError, TypeError):  # YAML, but not a kubeconfig's mappings and lists
        return _error(f"{args.kubeconfig} is not a kubeconfig (expected clusters, users and contexts)")
    if not endpoint.url.startswith(("http://", "https://")):
        return _error(f"the kubeconfig's server {endpoint.url!r} is not an http:// or https:// URL")
    method, path, body = _fault_request(args)
    try:
        status, answer = _request(endpoint, method, path, body)
    except (OSError, ValueError) as exc:  # refused, reset, timed out; or an answer that is not JSON
        return _error(f"no local cluster answers at {endpoint.url}: {exc}")
    print(json.dumps(answer, indent=2, sort_keys=True))
    return EXIT_OK if status < 400 else EXIT_FAILED


def _error(message: str) -> int:
    """Print one line (control characters escaped, so a hostile path cannot break it) and return 2."""
    print(
        "elastic-training cluster: error: " + "".join(c if c.isprintable() else repr(c)[1:-1] for c in message),
        file=sys.stderr,
    )
    return EXIT_USAGE


def _fault_request(args: argparse.Namespace) -> tuple[str, str, dict[str, Any] | None]:
    from elastic_training.local.faults.rules import FAULTS_PATH

    def present(**values: Any) -> dict[str, Any]:
        return {key: value for key, value in values.items() if value is not None}

    if args.fault == "delete-pod":
        return "POST", f"{FAULTS_PATH}/delete-pod", {"namespace": args.namespace, "name": args.name}
    if args.fault == "signal-pod":
        body = present(namespace=args.namespace, name=args.name, signal=args.signal, container=args.container)
        return "POST", f"{FAULTS_PATH}/signal-pod", body
    if args.fault == "fail-requests":
        body = present(
            code=args.code,
            count=args.count,
            probability=args.probability,
            seconds=args.seconds,
            retryAfter=args.retry_after,
            path=args.path,
            method=args.method,
        )
        return "POST", f"{FAULTS_PATH}/fail-requests", body
    if args.fault == "latency":
        body = present(seconds=args.seconds, path=args.path, method=args.method)
        return "POST", f"{FAULTS_PATH}/latency", body
    if args.fault == "expire-watches":
        return "POST", f"{FAULTS_PATH}/expire-watches", {"compact": args.compact}
    if args.fault == "lose-host":
        return "POST", f"{FAULTS_PATH}/lose-host", present(node=args.node, repairSeconds=args.repair_seconds)
    if args.fault == "provision-on-demand":
        body = {"nodePool": args.node_pool, "seconds": args.seconds}
        return "POST", f"{FAULTS_PATH}/provision-on-demand", body
    if args.fault == "repair-node-pool":
        return "POST", f"{FAULTS_PATH}/repair-node-pool", {"nodePool": args.node_pool, "seconds": args.seconds}
    if args.fault == "evict-pod":
        body = {"namespace": args.namespace, "name": args.name, "reason": args.reason}
        return "POST", f"{FAULTS_PATH}/evict-pod", body
    if args.fault == "stop-queue":
        body = present(clusterQueue=args.cluster_queue, localQueue=args.local_queue, stopPolicy=args.policy)
        return "POST", f"{FAULTS_PATH}/stop-queue", body
    if args.fault == "deactivate-workload":
        body = {"namespace": args.namespace, "jobSet": args.jobset, "active": bool(args.activate)}
        return "POST", f"{FAULTS_PATH}/deactivate-workload", body
    if args.fault == "kueue-configuration":
        return "POST", f"{FAULTS_PATH}/kueue-configuration", args.file
    if args.fault == "clear":
        return "DELETE", FAULTS_PATH, None
    return "GET", FAULTS_PATH, None


def _request(endpoint: Endpoint, method: str, path: str, body: dict[str, Any] | None) -> tuple[int, dict[str, Any]]:
    """One API request, verifying the server against the kubeconfig's CA."""
    import urllib.error
    import urllib.request

    headers = {"Content-Type": "application/json"}
    if endpoint.token:
        headers["Authorization"] = f"Bearer {endpoint.token}"
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(f"{endpoint.url}{path}", data=data, headers=headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=30, context=endpoint.ssl_context()) as response:
            return int(response.status), json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as error:
        return int(error.code), json.loads(error.read() or b"{}")
