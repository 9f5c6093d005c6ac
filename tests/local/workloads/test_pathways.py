"""The Pathways server and proxy stand-ins take the flags xpk renders and refuse others, as absl does."""

from __future__ import annotations

import signal

import pytest

from elastic_training.local.workloads.pathways import FlagError, parse_flags
from tests.support.workload_processes import run_module, start_module

RM = [
    "--server_port=29001",
    "--gcs_scratch_location=gs://cloud-pathways-staging/tmp",
    "--node_type=resource_manager",
    "--instance_count=3",
    "--instance_type=tpuv5e:4x4",
]
WORKER = ["--server_port=29005", "--resource_manager_address=h-pathways-head-0-0.h:29001", "--gcs_scratch_location=/x"]
PROXY = [
    "--server_port=29000",
    "--resource_manager_address=h-pathways-head-0-0.h:29001",
    "--gcs_scratch_location=gs://b/tmp",
    "--num_elastic_slices=3",
]


def test_xpk_flags_of_each_role_parse() -> None:
    rm = parse_flags("server", RM)
    assert (rm.node_type, rm.values["instance_count"], rm.values["instance_type"]) == (
        "resource_manager",
        3,
        "tpuv5e:4x4",
    )
    assert parse_flags("server", WORKER).node_type == "worker"
    proxy = parse_flags("proxy", [*PROXY, "--enable_metrics_collection=false"])
    assert (proxy.values["num_elastic_slices"], proxy.values["enable_metrics_collection"]) == (3, False)


@pytest.mark.parametrize(
    ("role", "argv", "message"),
    [
        ("server", [*RM, "--bogus=1"], "ERROR: Unknown command line flag 'bogus'"),
        ("proxy", [*PROXY, "--instance_count=3"], "ERROR: Unknown command line flag 'instance_count'"),
        ("server", ["--node_type=resource_manager", "--instance_type=tpuv5e:2x2"], "--instance_count is required"),
        ("server", ["--server_port=29005"], "--resource_manager_address is required for a worker"),
        (
            "server",
            [*RM[:3], "--instance_count=three", RM[4]],
            "Illegal value 'three' specified for flag 'instance_count'",
        ),
        ("server", ["--node_type=controller", *WORKER], "Illegal value 'controller' specified for flag 'node_type'"),
        ("proxy", ["positional", *PROXY], "positional argument"),
    ],
)
def test_bad_flags_are_refused(role: str, argv: list[str], message: str) -> None:
    with pytest.raises(FlagError) as raised:
        parse_flags(role, argv)
    assert message in str(raised.value)


def test_unknown_flag_exits_1_at_start() -> None:
    done = run_module(
        "elastic_training.local.workloads.pathways", ["server", *WORKER, "--xla_tpu_whatever=1"], timeout=30
    )
    assert done.returncode == 1
    assert "ERROR: Unknown command line flag 'xla_tpu_whatever'" in done.stderr


def test_held_worker_exits_3(tmp_path: object) -> None:
    hold = f"{tmp_path}/hold"
    open(hold, "w").close()
    done = run_module(
        "elastic_training.local.workloads.pathways", ["server", *WORKER], timeout=30, LOCAL_FAULT_HOLD_FILE=hold
    )
    assert done.returncode == 3
    assert "held down by" in done.stdout


@pytest.mark.parametrize(("stop", "code"), [(signal.SIGTERM, -signal.SIGTERM), (signal.SIGINT, 0)])
def test_a_role_stays_up_until_stopped_sigterm_ending_it_as_the_servers_own(stop: signal.Signals, code: int) -> None:
    """Up until a stop signal, however soon after its "up" line it comes: SIGTERM ends it by that signal (exit 143
    in a shell), SIGINT with 0."""
    process = start_module("elastic_training.local.workloads.pathways", ["server", *WORKER], LOCAL_POD_NAME="p-0")
    try:
        assert process.stdout is not None
        assert "Pathways worker p-0: up" in process.stdout.readline()
        process.send_signal(stop)  # at once: a signal that came as it entered its wait was once lost there
        rest, _ = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == code and f"received {stop.name}, exiting" in rest
