"""``elastic-training cluster up`` as a real subprocess, and ``cluster fault`` against it."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client, config

from tests.local.cluster.control_plane_support import process_alive
from tests.local.cluster.helpers import pod, wait_for

REPO = Path(__file__).resolve().parents[3]


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "cli.main", "cluster", *args]


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


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], Path]]:
    kubeconfig = tmp_path / "kubeconfig"
    process = subprocess.Popen(
        _cli("up", "--kubeconfig", str(kubeconfig), "--workdir", str(tmp_path / "work")),
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert process.stdout is not None
        banner = [process.stdout.readline() for _ in range(2)]
        assert banner[0].startswith("serving a Kubernetes API on http://127.0.0.1:"), banner
        assert banner[1].strip() == f"kubeconfig: {kubeconfig}"
        yield process, kubeconfig
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)


def test_up_serves_and_sigterm_stops_every_pod_process(served: tuple[subprocess.Popen[str], Path]) -> None:
    process, kubeconfig = served
    core = client.CoreV1Api(config.new_client_from_config(config_file=str(kubeconfig)))
    core.create_namespaced_pod("default", pod("cli-sleeper", command=["sleep", "60"], restart_policy="Never"))
    wait_for(lambda: core.read_namespaced_pod("cli-sleeper", "default").status.phase == "Running")
    pod_processes = wait_for(lambda: _descendants(process.pid))
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=30) == 0
    assert not [pid for pid in pod_processes if process_alive(pid)]


def test_fault_commands_reach_a_running_cluster(served: tuple[subprocess.Popen[str], Path]) -> None:
    _, kubeconfig = served
    env = {**os.environ, "PYTHONPATH": str(REPO)}

    def fault(*args: str) -> subprocess.CompletedProcess[str]:
        command = _cli("fault", "--kubeconfig", str(kubeconfig), *args)
        return subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=60)

    assert fault("fail-requests", "--code", "500", "--count", "1", "--path", "pods").returncode == 0
    core = client.CoreV1Api(config.new_client_from_config(config_file=str(kubeconfig)))
    with pytest.raises(client.ApiException) as caught:
        core.list_namespaced_pod("default")
    assert caught.value.status == 500
    assert fault("delete-pod", "default", "missing").returncode == 1
    assert fault("clear").returncode == 0


def test_port_in_use_and_unwritable_path_exit_2(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            _cli("up", "--kubeconfig", str(tmp_path / "kc"), "--port", str(port), "--workdir", str(tmp_path)),
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert result.returncode == 2 and "already in use" in result.stderr
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    result = subprocess.run(
        _cli("up", "--kubeconfig", str(blocker / "kc"), "--workdir", str(tmp_path / "w")),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2 and "cannot write" in result.stderr
