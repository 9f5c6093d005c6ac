"""``elastic-training cluster up`` as a real subprocess (the upstream control plane and the node agent), and
``cluster fault`` against it. tests/local/faults/test_faults.py shows each fault's effect in depth."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config

from elastic_training.cli.main import main
from elastic_training.local.controlplane.processes import free_port
from elastic_training.local.kubeconfig import FAULTS_CONTEXT
from tests.support.cluster_objects import pod
from tests.support.control_plane import armed, process_alive, wait_armed
from tests.support.waiting import wait_for

REPO = Path(__file__).resolve().parents[3]
MARK = "ELASTIC_TRAINING_CLI_TEST_MARK"  # in the environment of every process a `cluster up` here starts


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "elastic_training.cli.main", "cluster", *args]


def _descendants(root: int) -> set[int]:
    """Every live process below ``root`` (read from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if fields[0] != "Z":
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    found: set[int] = set()
    pending = [root]
    while pending:
        for child in children.get(pending.pop(), []):
            found.add(child)
            pending.append(child)
    return found


def _marked(mark: str) -> list[int]:
    """Live processes whose environment carries ``MARK=mark`` (the CLI's process and whatever it started)."""
    needle = f"{MARK}={mark}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and needle in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except OSError:
            continue
    return [pid for pid in found if process_alive(pid)]


def _command(pid: int) -> str:
    """The process's executable name (its ``comm``), empty once it is gone."""
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _core(kubeconfig: Path) -> client.CoreV1Api:
    """The admin's CoreV1Api, once kube-controller-manager has made ``default/default`` (pods need it)."""
    core = client.CoreV1Api(config.new_client_from_config(config_file=str(kubeconfig)))

    def made() -> bool:
        try:
            return bool(core.read_namespaced_service_account("default", "default"))
        except client.ApiException as err:
            if err.status != 404:
                raise
            return False

    wait_for(made, 60)
    return core


@contextmanager
def _serve(*args: str, mark: str = "") -> Iterator[tuple[subprocess.Popen[str], str]]:
    """``cluster up ARGS`` in the foreground; yields the process and the URL from its banner."""
    process = subprocess.Popen(
        _cli("up", *args),
        cwd=REPO,
        env={**os.environ, MARK: mark},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert process.stdout is not None
        lines = []  # each component's "ready in" line, then the banner
        while not (line := process.stdout.readline()).startswith("serving a Kubernetes API on "):
            lines.append(line)
            assert line, lines  # it exited before serving
        assert line.startswith("serving a Kubernetes API on https://127.0.0.1:") and "(kube-apiserver)" in line
        banner = [line, *(process.stdout.readline() for _ in range(4))]
        assert banner[-1].startswith("faults and the API fault proxy: https://127.0.0.1:"), banner
        yield process, line.split()[-2]
    finally:
        if process.poll() is None:  # a test that failed before stopping it: stopped as a user would, then killed
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)


@dataclass(frozen=True)
class Up:
    """A ``cluster up`` serving with ``--kubeconfig``, ``--port`` and ``--workdir`` (and the test's own flags)."""

    process: subprocess.Popen[str]
    url: str
    port: int
    kubeconfig: Path
    workdir: Path
    mark: str  # in the environment of every process it started


@contextmanager
def _up_with_flags(directory: Path, *extra: str) -> Iterator[Up]:
    """``cluster up`` on a free port, its kubeconfig and workdir under ``directory``, until the block ends."""
    kubeconfig, workdir, mark = directory / "kubeconfig", directory / "work", uuid.uuid4().hex
    with ExitStack() as stack:
        for attempt in range(3):  # someone else may take the free port before the CLI binds it
            port = free_port()
            try:
                args = ["--kubeconfig", str(kubeconfig), "--port", str(port), "--workdir", str(workdir), *extra]
                process, url = stack.enter_context(_serve(*args, mark=mark))
                break
            except AssertionError:
                if attempt == 2:
                    raise
        yield Up(process, url, port, kubeconfig, workdir, mark)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Up]:
    """One ``cluster up`` without ``--description`` (v5e-small, the default) for the module: the tests below
    share it in file order, and the SIGTERM test, the last of them, stops it."""
    with _up_with_flags(tmp_path_factory.mktemp("served")) as up:
        yield up


# A pod whose shell forks a background child and a double-forked grandchild (reparented away from the
# shell at once, so no process tree reaches it), both ignoring SIGTERM, then waits.
_FORKING = (
    "trap '' TERM; (sh -c \"trap '' TERM; sleep 300\" & echo $! > {dir}/grandchild); "
    "sh -c \"trap '' TERM; sleep 300\" & echo $! > {dir}/child; echo started; wait"
)


def _forked_pids(directory: Path) -> list[int]:
    files = [directory / "child", directory / "grandchild"]
    wait_for(lambda: all(f.exists() and f.read_text().strip() for f in files))
    return [int(f.read_text()) for f in files]


def _honours_its_flags_and_a_signal_stops_every_pod_process(up: Up, stop_signal: int, pids: Path) -> None:
    """The URL, the kubeconfig and the workdir are the flags'; ``stop_signal`` ends it with every pod process."""
    process = up.process
    assert up.url == f"https://127.0.0.1:{up.port}"
    api_client = config.new_client_from_config(config_file=str(up.kubeconfig))
    assert api_client.configuration.host == up.url
    core = _core(up.kubeconfig)
    command = ["sh", "-c", _FORKING.format(dir=pids)]
    created = core.create_namespaced_pod("default", pod("cli-forker", command=command, restart_policy="Never"))
    forked = _forked_pids(pids)
    # --workdir holds the pod's log files and its working directory.
    log_file = up.workdir / "logs" / created.metadata.uid / "main" / "0.log"
    wait_for(lambda: log_file.exists() and "started" in log_file.read_text())
    assert (up.workdir / "pods" / f"default_cli-forker_{created.metadata.uid}").is_dir()
    # The listening API port belongs to a kube-apiserver process the CLI started.
    control_plane = [pid for pid in _descendants(process.pid) if _command(pid).startswith("kube-apiserver")]
    assert control_plane and process.pid in _marked(up.mark)
    pod_processes = _descendants(process.pid)
    assert all(process_alive(pid) for pid in forked) and process.pid in _marked(up.mark)
    process.send_signal(stop_signal)
    assert process.wait(timeout=60) == 0
    # Every pod process is gone, the forked ones too, and so is the cluster's group reaper.
    assert not [pid for pid in [*pod_processes, *forked] if process_alive(pid)]
    assert _marked(up.mark) == []


def test_up_without_a_description_serves_v5e_small(served: Up) -> None:
    pools = {n.metadata.labels["cloud.google.com/gke-nodepool"] for n in _core(served.kubeconfig).list_node().items}
    assert pools == {*(f"tpu-v5e-16-{i}" for i in range(4)), "tpu-v5e-4", "cpu-np"}


def test_fault_commands_reach_a_running_cluster(served: Up, capsys: pytest.CaptureFixture[str]) -> None:
    kubeconfig = served.kubeconfig

    def fault(*args: str) -> tuple[int, dict[str, Any]]:
        capsys.readouterr()
        code = main(["cluster", "fault", "--kubeconfig", str(kubeconfig), *args])
        return code, json.loads(capsys.readouterr().out)

    code, rule = fault("fail-requests", "--code", "500", "--count", "1", "--path", "pods$", "--method", "GET")
    assert (code, rule["code"], rule["count"], rule["path"], rule["method"]) == (0, 500, 1, "pods$", "GET")
    code, shown = fault("show")
    assert code == 0 and [r["id"] for r in shown["failures"]] == [rule["id"]]
    core = _core(kubeconfig)
    core.list_namespaced_pod("default")  # the default context talks to kube-apiserver: no API faults there
    proxied = client.CoreV1Api(config.new_client_from_config(config_file=str(kubeconfig), context=FAULTS_CONTEXT))
    with pytest.raises(client.ApiException) as caught:
        proxied.list_namespaced_pod("default")
    assert caught.value.status == 500
    code, burst = fault("fail-requests", "--code", "429", "--seconds", "60", "--retry-after", "0", "--path", "nodes$")
    assert (code, burst["code"], burst["retry_after"], burst["count"]) == (0, 429, 0, None)
    assert time.time() < burst["until"] <= time.time() + 60
    code, latency = fault("latency", "--seconds", "0.01", "--path", "jobs", "--method", "GET")
    assert (code, latency["seconds"], latency["method"]) == (0, 0.01, "GET")
    assert fault("clear") == (0, {"failures": [], "latencies": [], "injected": 1})
    script = armed("trap 'exit 7' TERM")
    core.create_namespaced_pod("default", pod("cli-signal", command=["sh", "-c", script], restart_policy="Never"))
    wait_armed(core, "cli-signal")  # running is not enough: a SIGTERM before the trap kills the shell outright
    assert fault("signal-pod", "default", "cli-signal", "--signal", "TERM", "--container", "main")[0] == 0
    done = wait_for(lambda: (p := core.read_namespaced_pod("cli-signal", "default")).status.phase == "Failed" and p)
    assert done.status.container_statuses[0].state.terminated.exit_code == 7  # its TERM trap ran
    assert fault("expire-watches", "--compact")[1] == {"expired": 0, "compacted": True}
    assert fault("delete-pod", "default", "cli-signal")[0] == 0
    with pytest.raises(client.ApiException) as caught:
        core.read_namespaced_pod("cli-signal", "default")
    assert caught.value.status == 404
    code, refused = fault("delete-pod", "default", "missing")
    assert (code, refused["code"]) == (1, 404)  # the cluster's Status, printed
    code, lost = fault("lose-host", "gke-local-tpu-v5e-16-1-2", "--repair-seconds", "0")
    assert (code, lost["nodePool"], len(lost["nodes"]), lost["repairSeconds"]) == (0, "tpu-v5e-16-1", 4, 0)
    code, repaired = fault("repair-node-pool", "tpu-v5e-16-2", "--seconds", "0")
    assert (code, len(repaired["nodes"]), repaired["evictedPods"]) == (0, 4, [])
    assert fault("lose-host", "no-such-node")[0] == 1
    assert fault("evict-pod", "default", "missing", "--reason", "PreemptionByScheduler")[0] == 1
    # Kueue's own faults: a queue stopped, a Workload deactivated, a new manager Configuration.
    code, held = fault("stop-queue", "--cluster-queue", "cluster-queue", "--policy", "Hold")
    assert (code, held["spec"]["stopPolicy"]) == (0, "Hold")
    assert fault("stop-queue", "--local-queue", "default/multislice-queue", "--policy", "None")[0] == 0
    assert fault("deactivate-workload", "default", "missing")[0] == 1
    configuration = kubeconfig.parent / "kueue-config.yaml"
    configuration.write_text("waitForPodsReady:\n  timeout: 5m\n  recoveryTimeout: 90s\n")
    code, applied = fault("kueue-configuration", str(configuration))
    assert (code, applied["waitForPodsReady"]["recoveryTimeout"]) == (0, "90s")  # as written: Kueue reads it
    assert "waitForPodsReady" not in fault("kueue-configuration", "-")[1]  # off again


def test_up_honours_its_flags_and_sigterm_stops_every_pod_process(served: Up, tmp_path: Path) -> None:
    _honours_its_flags_and_a_signal_stops_every_pod_process(served, signal.SIGTERM, tmp_path)  # served's end


def test_up_serves_its_descriptions_nodes_and_sigint_stops_every_pod_process(tmp_path: Path) -> None:
    description = tmp_path / "pools.yaml"
    description.write_text(
        "cluster: cli\nnodePools:\n  - {name: cpu-np, machineType: n2-standard-8, nodeCount: 2, cpu: 8, memory: 32Gi}\n"
    )
    with _up_with_flags(tmp_path, "--description", str(description)) as up:
        nodes = [n.metadata.name for n in _core(up.kubeconfig).list_node().items]
        assert nodes == ["gke-cli-cpu-np-0", "gke-cli-cpu-np-1"]
        _honours_its_flags_and_a_signal_stops_every_pod_process(up, signal.SIGINT, tmp_path)


@pytest.mark.parametrize(
    "args",
    [
        ["fail-requests", "--code", "200"],
        ["fail-requests", "--count", "0"],
        ["fail-requests", "--probability", "1.5"],
        ["fail-requests", "--count", "1", "--probability", "0.5"],
        ["fail-requests", "--path", "("],
        ["fail-requests", "--seconds", "0"],
        ["fail-requests", "--retry-after", "-1"],
        ["latency", "--seconds", "-1"],
        ["latency"],
        ["signal-pod", "default", "p", "--signal", "SIGNOPE"],
        ["delete-pod", "default"],
        ["lose-host"],
        ["lose-host", "n", "--repair-seconds", "-1"],
        ["repair-node-pool", "pool"],
        ["repair-node-pool", "pool", "--seconds", "86401"],
        ["provision-on-demand", "pool"],
        ["provision-on-demand", "pool", "--seconds", "-1"],
        ["evict-pod", "default", "p", "--reason", "Because"],
        ["explode"],
    ],
    ids=lambda args: " ".join(args),
)
def test_fault_usage_errors_exit_2(tmp_path: Path, args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["cluster", "fault", "--kubeconfig", str(tmp_path / "kc"), *args])
    assert exited.value.code == 2
    assert "error: " in capsys.readouterr().err


def test_fault_without_a_cluster_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cluster", "fault", "--kubeconfig", str(tmp_path / "missing"), "show"]) == 2
    assert "cannot read the kubeconfig" in capsys.readouterr().err
    from elastic_training.local.kubeconfig import write_kubeconfig

    stale = write_kubeconfig(tmp_path / "stale", f"http://127.0.0.1:{free_port()}", "token")  # nothing listens
    assert main(["cluster", "fault", "--kubeconfig", str(stale), "show"]) == 2
    assert "no local cluster answers" in capsys.readouterr().err


def test_bad_input_to_up_exits_2_with_one_clear_line_and_leaves_nothing_running(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    bad_description = tmp_path / "bad.yaml"
    bad_description.write_text(
        "nodePools:\n  - name: tpu\n    machineType: ct5lp-hightpu-4t\n    nodeCount: 2\n    cpu: 112\n"
        "    memory: 192Gi\n    tpu: {accelerator: tpu-v5-lite-podslice, topology: 4x4, chipsPerNode: 4}\n"
    )
    kubeconfig = tmp_path / "kc"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        cases = [
            (["--port", str(port)], f"port {port} on 127.0.0.1 is already in use"),
            (["--port", "70000"], "argument --port: invalid port (0-65535) value: '70000'"),
            (["--port", "-1"], "argument --port: invalid port (0-65535) value: '-1'"),
            (["--watch-history", "5"], "--watch-history is retired: kube-apiserver sizes its own watch cache"),
            (["--workdir", str(blocker)], "cannot write the cluster's files"),
            (["--workdir", str(blocker / "w")], "cannot write the cluster's files"),
            (["--description", str(tmp_path / "none.yaml")], "cannot read the cluster description"),
            (["--description", str(bad_description)], "nodePools[0].nodeCount: a 4x4 slice of 4-chip hosts has 4"),
        ]
        for extra, message in cases:
            mark = uuid.uuid4().hex
            result = subprocess.run(
                _cli("up", "--kubeconfig", str(kubeconfig), "--workdir", str(tmp_path / "w"), *extra),
                cwd=REPO,
                env={**os.environ, MARK: mark},
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert result.returncode == 2, (extra, result.stderr)
            errors = [line for line in result.stderr.splitlines() if "error: " in line]
            assert len(errors) == 1 and message in errors[0], (extra, result.stderr)
            assert "Traceback" not in result.stderr
            assert not kubeconfig.exists()  # nothing was served, so no kubeconfig points at it
            assert _marked(mark) == []
    for unwritable in (blocker / "kc", tmp_path):  # under a file; a directory
        result = subprocess.run(
            _cli("up", "--kubeconfig", str(unwritable), "--workdir", str(tmp_path / "w")),
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 2 and "cannot write the kubeconfig" in result.stderr, result.stderr
    assert not (tmp_path / "w").exists()  # refused before anything was made


@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_while_starting_stops_what_started_and_leaves_no_kubeconfig(tmp_path: Path, stop_signal: int) -> None:
    kubeconfig, mark = tmp_path / "kubeconfig", uuid.uuid4().hex
    process = subprocess.Popen(
        _cli("up", "--kubeconfig", str(kubeconfig), "--workdir", str(tmp_path / "w")),
        cwd=REPO,
        env={**os.environ, MARK: mark},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert process.stdout is not None
        assert process.stdout.readline().startswith("etcd ready in")  # etcd runs; kube-apiserver is starting
        process.send_signal(stop_signal)
        assert process.wait(timeout=60) == 1
        out = process.stdout.read()
        assert f"stopped by {signal.Signals(stop_signal).name} before the cluster was up" in out, out
        assert "serving a Kubernetes API" not in out and "Traceback" not in out
        assert not kubeconfig.exists()
        assert _marked(mark) == []  # etcd and kube-apiserver stopped with it
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
