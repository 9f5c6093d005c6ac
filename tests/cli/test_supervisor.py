"""`cli.supervisor`: children lead their own process groups, and stopping a child reaches what it forked."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

import psutil

from elastic_training.cli.supervisor import SignalRelay, Supervisor

# A parent that forks a grandchild, then both sleep; the parent optionally ignores SIGTERM.
FAMILY = """
import os, signal, subprocess, sys, time
if sys.argv[1] == "stubborn":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
print(child.pid, flush=True)
time.sleep(600)
"""


def _grandchild(log: Path) -> psutil.Process:
    deadline = time.monotonic() + 60
    while not log.read_text().strip():
        assert time.monotonic() < deadline, "the child never started its own child"
        time.sleep(0.1)
    return psutil.Process(int(log.read_text().split()[0]))


def _gone(process: psutil.Process) -> bool:
    try:
        return not process.is_running() or process.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_each_child_leads_its_own_group_and_stop_reaches_its_children(tmp_path: Path) -> None:
    supervisor = Supervisor(tmp_path)
    child = supervisor.start("family", [sys.executable, "-c", FAMILY, "polite"], os.environ)
    grandchild = _grandchild(child.log_path)
    assert os.getpgid(child.pid) == child.pid != os.getpgid(0)
    assert os.getpgid(grandchild.pid) == child.pid
    supervisor.stop_all(grace_seconds=30)
    assert child.exited() is not None
    assert _gone(grandchild)


def test_a_child_that_ignores_sigterm_is_killed_after_the_grace(tmp_path: Path) -> None:
    supervisor = Supervisor(tmp_path)
    child = supervisor.start("stubborn", [sys.executable, "-c", FAMILY, "stubborn"], os.environ)
    grandchild = _grandchild(child.log_path)
    messages: list[str] = []
    supervisor.stop_all(grace_seconds=1, progress=messages.append)
    assert messages == ["stopping stubborn"]
    assert child.exited() == -9
    assert _gone(grandchild)


def test_a_child_that_exited_on_its_own_is_reported_with_its_output(tmp_path: Path) -> None:
    supervisor = Supervisor(tmp_path)
    supervisor.start("fine", [sys.executable, "-c", "import time; time.sleep(600)"], os.environ)
    crashed = supervisor.start("crash", [sys.executable, "-c", "print('boom'); raise SystemExit(3)"], os.environ)
    deadline = time.monotonic() + 60
    while supervisor.first_exited() is None:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert supervisor.first_exited() is crashed
    assert crashed.exited() == 3
    assert crashed.log_tail() == "boom"
    supervisor.stop_all(grace_seconds=30)
    assert all(child.exited() is not None for child in supervisor.children)


def test_a_signal_relay_sets_its_event_from_a_handler() -> None:
    """A handler only calls the relay (nothing there takes a lock the interrupted main thread may hold); its thread
    sets the Event, which a main thread waiting on it then sees."""
    stop = threading.Event()
    relay = SignalRelay(stop)
    previous = signal.signal(signal.SIGUSR1, lambda *_: relay())
    try:
        os.kill(os.getpid(), signal.SIGUSR1)
        assert stop.wait(10), "the relay never set the event"
        stop.clear()
        os.kill(os.getpid(), signal.SIGUSR1)  # and again: the relay serves every signal, not the first only
        assert stop.wait(10), "the relay set the event only once"
    finally:
        signal.signal(signal.SIGUSR1, previous)
