"""The stand-in trainer held to real MaxText 0.2.5: both run from the same arguments, their output compared.

Real MaxText runs once per session (tests/support/real_maxtext.py); the stand-in
(``python -m elastic_training.local.workloads.maxtext_train``, what the local cluster runs for the MaxText
image's ``python3 -m maxtext.trainers.pre_train.train``) runs here from the same ``key=value`` arguments; its
config file is the image's path (``src/maxtext/configs/base.yml``, the stand-in's copy), real MaxText's is
the base.yml in its venv. Compared: the log lines the operator parses (operators/constants.py), the
checkpoint tree, the refusals and their exit codes, and a finished run re-run. Differences kept on purpose
are asserted as such and listed in docs/workloads.md.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from elastic_training.local.workloads.maxtext_config import MAXTEXT_EXIT_CONFIG_ERROR, MODELLED
from elastic_training.operators.constants import (
    ALREADY_AT_TARGET_RE,
    ASYNC_SAVE_STARTED_RE,
    COMPLETED_STEP_RE,
    CONFIG_ERROR_RE,
    NO_CHECKPOINT_RE,
    RESTORING_STEP_RE,
)
from elastic_training.operators.recovery import LogDigest
from tests.support.real_maxtext import (
    BAD_VALUE,
    RESUME_STEPS,
    STEPS,
    UNKNOWN_KEY,
    RealMaxText,
    RealRun,
    model_args,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

IMAGE_CONFIG = "src/maxtext/configs/base.yml"
RUN_TIMEOUT_S = 600
_HASH = re.compile(r"[0-9a-f]{32}$")
# MaxText's uncaught RuntimeError for a finished run (maxtext/utils/train_utils.py validate_completed_steps).
ALREADY_DONE = (
    f"RuntimeError: Requested training up to step {STEPS}, but a checkpoint already exists at step {STEPS - 1} "
    f"(which means {STEPS} steps have been completed)."
)


@dataclass(frozen=True)
class StandInRun:
    """One run of the stand-in trainer."""

    exit_code: int
    log: str


def _stand_in(args: list[str], cwd: Path) -> StandInRun:
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    done = subprocess.run(
        [sys.executable, "-m", "elastic_training.local.workloads.maxtext_train", IMAGE_CONFIG, *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )
    return StandInRun(done.returncode, done.stdout + done.stderr)


# Session-scoped, and named before `real_maxtext` by each test, so that pytest sets it up first: the stand-in
# runs while another xdist worker runs real MaxText, instead of after it.
@pytest.fixture(scope="session")
def stand_in(tmp_path_factory: pytest.TempPathFactory) -> dict[str, StandInRun | Path]:
    """The stand-in's runs, in the order of real MaxText's plan (tests/support/real_maxtext.py)."""
    base = tmp_path_factory.mktemp("stand-in")
    out, resumed = base / "out", base / "resumed"
    runs: dict[str, StandInRun | Path] = {"directory": base}
    runs["train"] = _stand_in(model_args(out), base)
    runs["rerun"] = _stand_in(model_args(out), base)
    shutil.copytree(out, resumed)
    runs["resume"] = _stand_in(model_args(resumed, steps=RESUME_STEPS), base)
    runs["unknown_key"] = _stand_in([*model_args(base / "refused"), f"{UNKNOWN_KEY}=1"], base)
    runs["bad_value"] = _stand_in([*model_args(base / "refused"), "=".join(BAD_VALUE)], base)
    return runs


def _run(stand_in: dict[str, StandInRun | Path], name: str) -> StandInRun:
    run = stand_in[name]
    assert isinstance(run, StandInRun)
    return run


def _parsed(log: str) -> dict[str, object]:
    """What the operator reads from a trainer's log (its regexes, operators/constants.py)."""
    steps = [(int(m[1]), float(m[2])) for m in COMPLETED_STEP_RE.finditer(log)]
    return {
        "completed": [step for step, _ in steps],
        "seconds_are_numbers": all(seconds >= 0 for _, seconds in steps),
        "saves": sorted(int(m[1]) for m in ASYNC_SAVE_STARTED_RE.finditer(log)),
        "restored": [int(m[1]) for m in RESTORING_STEP_RE.finditer(log)],
        "no_checkpoint": len(NO_CHECKPOINT_RE.findall(log)),
    }


def test_the_same_lines_the_operator_parses(stand_in: dict[str, StandInRun | Path], real_maxtext: RealMaxText) -> None:
    for name in ("train", "resume"):
        real, local = real_maxtext.runs[name], _run(stand_in, name)
        assert real.exit_code == local.exit_code == 0, (name, local.log[-2000:])
        assert _parsed(local.log) == _parsed(real.log), name
    fresh = _parsed(real_maxtext.runs["train"].log)
    assert fresh["completed"] == list(range(STEPS)) and fresh["saves"] == [0, 10, 20, 29]
    assert fresh["no_checkpoint"] == 1 and fresh["restored"] == []
    resumed = _parsed(real_maxtext.runs["resume"].log)
    assert resumed["restored"] == [STEPS - 1] and resumed["completed"] == list(range(STEPS, RESUME_STEPS))
    assert resumed["saves"] == [STEPS, RESUME_STEPS - 1]


def _files(step: Path) -> list[str]:
    # OCDBT data files are named by content hash and their number follows the arrays' sizes.
    return sorted({_HASH.sub("<hash>", str(p.relative_to(step))) for p in step.rglob("*") if p.is_file()})


def _tree_top(step: Path) -> dict[str, int | None]:
    """The PyTree's top-level keys and the key type under each (Orbax: 1 a sequence, 2 a dict; None a leaf)."""
    tree = json.loads((step / "items" / "_METADATA").read_text())["tree_metadata"]
    top: dict[str, int | None] = {}
    for entry in tree.values():
        keys = entry["key_metadata"]
        top.setdefault(keys[0]["key"], keys[1]["key_type"] if len(keys) > 1 else None)
    return top


def test_the_same_checkpoint_tree(stand_in: dict[str, StandInRun | Path], real_maxtext: RealMaxText) -> None:
    directory = stand_in["directory"]
    assert isinstance(directory, Path)
    local_root = directory / "out" / "t1" / "checkpoints"
    real_root = real_maxtext.checkpoints
    assert sorted(os.listdir(local_root), key=int) == sorted(os.listdir(real_root), key=int) == ["0", "10", "20", "29"]
    for step in ("0", "29"):
        real, local = real_root / step, local_root / step
        assert _files(local) == _files(real)
        real_meta = json.loads((real / "_CHECKPOINT_METADATA").read_text())
        local_meta = json.loads((local / "_CHECKPOINT_METADATA").read_text())
        assert sorted(local_meta) == sorted(real_meta)
        assert list(local_meta["item_handlers"]) == list(real_meta["item_handlers"]) == ["items"]
        assert local_meta["commit_timestamp_nsecs"] and real_meta["commit_timestamp_nsecs"]
        real_item = json.loads((real / "items" / "_METADATA").read_text())
        local_item = json.loads((local / "items" / "_METADATA").read_text())
        assert sorted(local_item) == sorted(real_item)
        assert (local_item["use_ocdbt"], local_item["use_zarr3"]) == (real_item["use_ocdbt"], real_item["use_zarr3"])
        real_top, local_top = _tree_top(real), _tree_top(local)
        # Listed difference: MaxText's NNX model keeps its RNG streams' state under nnx_aux; the stand-in's has none.
        assert set(real_top) - set(local_top) == {"nnx_aux"}
        assert {k: real_top[k] for k in local_top} == local_top == {"opt_state": 1, "params": 2, "step": None}


def _config_error(log: str) -> str:
    match = CONFIG_ERROR_RE.search(log)
    assert match, log[-2000:]
    return match[1]


def test_an_unknown_key_is_refused_alike(stand_in: dict[str, StandInRun | Path], real_maxtext: RealMaxText) -> None:
    real, local = real_maxtext.runs["unknown_key"], _run(stand_in, "unknown_key")
    warning = f"Ignoring invalid/unsupported field from YAML/CLI: '{UNKNOWN_KEY}'"
    assert warning in real.log and warning in local.log
    prefix = f"'{UNKNOWN_KEY}' not in '"
    assert _config_error(real.log).startswith(prefix) and _config_error(local.log).startswith(prefix)
    _assert_refusal_exit_codes(real, local)


def test_a_bad_value_is_refused_alike(stand_in: dict[str, StandInRun | Path], real_maxtext: RealMaxText) -> None:
    real, local = real_maxtext.runs["bad_value"], _run(stand_in, "bad_value")
    assert _config_error(real.log) and _config_error(local.log)
    key, value = BAD_VALUE
    assert f"input_value='{value}'" in real.log  # pydantic's ValidationError, one line per field after it
    assert key in _config_error(local.log)
    _assert_refusal_exit_codes(real, local)


def _assert_refusal_exit_codes(real: RealRun, local: StandInRun) -> None:
    # MaxText exits 2 only when neither pytest nor unittest is imported (pyconfig.py _handle_config_exception); its
    # trainer imports JAX, whose path module imports etils.epath, which imports unittest, so the ValueError is
    # re-raised: a traceback and exit 1, as a trainer crash exits. The stand-in does the same; the operator knows
    # the refusal by its line (operators/constants.py CONFIG_ERROR_RE), not by its exit code.
    assert real.exit_code == local.exit_code == MAXTEXT_EXIT_CONFIG_ERROR == 1
    assert "Traceback" in real.log and "Traceback" in local.log
    for log in (real.log, local.log):
        digest = LogDigest().feed_all((0.0, line) for line in log.splitlines())
        assert digest.config_error == _config_error(log).strip()[:500]  # kept bounded, as the digest travels


def test_a_finished_run_rerun_exits_1(stand_in: dict[str, StandInRun | Path], real_maxtext: RealMaxText) -> None:
    real, local = real_maxtext.runs["rerun"], _run(stand_in, "rerun")
    assert real.exit_code == local.exit_code == 1
    assert ALREADY_DONE in real.log and ALREADY_DONE in local.log
    for log in (real.log, local.log):
        match = ALREADY_AT_TARGET_RE.search(log)
        assert match and (int(match[1]), int(match[2])) == (STEPS, STEPS - 1)
        # What the operator folds from it: the run is done once its committed step says so (operators/policy.py).
        digest = LogDigest().feed_all((0.0, line) for line in log.splitlines())
        assert digest.already_at_target == [STEPS, STEPS - 1] and digest.config_error is None
    assert not RESTORING_STEP_RE.search(real.log) and not RESTORING_STEP_RE.search(local.log)


def test_the_keys_the_stand_in_models_are_real_maxtext_keys(real_maxtext: RealMaxText) -> None:
    keys = set(yaml.safe_load(real_maxtext.config.read_text()))
    assert set(MODELLED) <= keys
    assert {a.split("=", 1)[0] for a in model_args("x")} <= keys
