"""Run real MaxText's trainer several times from one import; run by .venv-maxtext's Python, not the project's.

usage: python real_maxtext_driver.py PLAN.json RESULT.json

PLAN is ``{"module": "maxtext.trainers.pre_train.train", "runs": [{"name", "argv", "log", "copy"?}]}``.
Importing MaxText's trainer is most of a tiny run's time (about 50 s of 70 on 2 loaded cores), so the driver
imports the module once, then forks one child per run, in order. A child runs the module as ``python -m``
does (``runpy`` as ``__main__``, ``sys.argv`` = the module's path and the run's arguments) with its stdout and
stderr on the run's log, and exits as the interpreter would: SystemExit's code, or 1 with the traceback for an
uncaught exception. ``copy`` ([src, dst]) copies a run directory first (a resume that leaves the original
alone). RESULT gets ``{"runs": {name: {"exit_code", "seconds"}}, "import_seconds"}``.

Kept free of the project's imports: the project is not installed in MaxText's venv.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import runpy
import shutil
import sys
import time
import traceback


def _child(module: str, argv: list[str], log: str) -> None:
    code = 1
    try:
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        sys.argv = [sys.modules[module].__file__ or module, *argv]
        try:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as exc:
            if exc.code is None:
                code = 0
            elif isinstance(exc.code, int):
                code = exc.code
            else:
                print(exc.code, file=sys.stderr)
                code = 1
        except BaseException:
            traceback.print_exc()
            code = 1
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)


def main(plan_path: str, result_path: str) -> int:
    """Import the module, run each planned run in a forked child, write the exit codes."""
    with open(plan_path) as f:
        plan = json.load(f)
    module = plan["module"]
    started = time.monotonic()
    importlib.import_module(module)
    result: dict[str, object] = {"import_seconds": round(time.monotonic() - started, 1), "runs": {}}
    runs: dict[str, object] = result["runs"]  # type: ignore[assignment]
    for run in plan["runs"]:
        if run.get("copy"):
            src, dst = run["copy"]
            shutil.copytree(src, dst)
        sys.stdout.flush()
        sys.stderr.flush()
        began = time.monotonic()
        pid = os.fork()
        if pid == 0:
            _child(module, list(run["argv"]), run["log"])
        _, status = os.waitpid(pid, 0)
        runs[run["name"]] = {
            "exit_code": os.waitstatus_to_exitcode(status),
            "seconds": round(time.monotonic() - began, 1),
        }
    with open(result_path, "w") as f:
        json.dump(result, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1], sys.argv[2]))
