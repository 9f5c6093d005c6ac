"""The evaluation and synthesis stages: MaxText's command lines, the same JobSet bytes on both runtimes, the gate."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowFailException

from elastic_training.local.descriptions.cluster_description import load_description
from elastic_training.local.workloads.maxtext_config import maxtext_keys
from elastic_training.operators import kube_names, manifests
from elastic_training.operators.pipeline import (
    StageJobSetOperator,
    evaluate_args,
    gate_on_eval,
    stage_host,
    synthesize_args,
)
from elastic_training.operators.pipeline_config import PipelineConfig
from elastic_training.operators.pipeline_params import (
    LOCAL_EVAL_COMMAND,
    LOCAL_SYNTH_COMMAND,
    ParamError,
    validate_params,
)
from elastic_training.operators.spec import LOCAL_MAXTEXT_IMAGE
from tests.support.eval_results import maxtext_result
from tests.support.pipeline_params import GKE_STAGE_PARAMS as GKE
from tests.support.pipeline_params import STAGES_RUN as RUN

HF_PATH = "meta-llama/Llama-3.1-8B"
ITEMS = "gs://team-bucket/llm/nightly-20261201/checkpoints/79/items"


def gke_config(**params: Any) -> PipelineConfig:
    return validate_params({**GKE, "hf_path": HF_PATH, **params}, run=RUN)


def local_config(root: Path, **params: Any) -> PipelineConfig:
    return validate_params(
        {"base_output_directory": str(root), **params},
        run=RUN,
        environ={"ELASTIC_TRAINING_DATA_DIR": str(root)},
    )


def rendered(stage: str, config: PipelineConfig, step: int = 79) -> dict[str, Any]:
    operator = StageJobSetOperator(task_id=stage, stage=stage)
    operator.configure(config, step)
    body = manifests.plain_jobset(
        operator.build_job(), name=f"{stage}-abc123", namespace="default", labels={}, stage=stage
    )
    pod: dict[str, Any] = body["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    return pod


def test_gke_evaluation_runs_maxtexts_eval_framework_on_one_tpu_host() -> None:
    pod = rendered("evaluate", gke_config())
    [container] = pod["containers"]
    assert container["image"] == "us-docker.pkg.dev/p/r/maxtext-eval:1"
    assert container["command"] == ["python3", "-m", "maxtext.eval.runner.run"]
    assert container["args"] == [
        "--runner=lm_eval",
        f"--checkpoint_path={ITEMS}",
        "--model_name=default",
        f"--hf_path={HF_PATH}",
        "--tasks=lambada_openai",
        "--base_output_directory=gs://team-bucket/llm",
        "--run_name=nightly-20261201",
        "--max_model_len=2048",
        "--tensor_parallel_size=4",
    ]
    # A 4x4 v5e slice has 4 hosts: the stage takes a single-host 2x2 pool of the same type, all 4 chips.
    assert container["resources"] == {"limits": {"google.com/tpu": "4"}}
    assert pod["nodeSelector"] == {
        "cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice",
        "cloud.google.com/gke-tpu-topology": "2x2",
    }
    assert pod["tolerations"] == [{"key": "google.com/tpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert pod["restartPolicy"] == "Never"


def test_gke_synthesis_runs_our_program_with_maxtext_keys_only() -> None:
    pod = rendered("synthesize", gke_config(tpu_type="v5p", tpu_topology="2x2x1"))
    [container] = pod["containers"]
    assert container["image"] == "us-docker.pkg.dev/p/r/maxtext-synthesize:1"
    assert container["command"] == ["python3", "-m", "maxtext_synthesize"]
    args = container["args"]
    assert args[:4] == [
        "--num_samples=16",
        "--sample_seed=0",
        "--output_directory=gs://team-bucket/llm/nightly-20261201/synthetic/step_79",
        "src/maxtext/configs/base.yml",
    ]
    keys = dict(arg.split("=", 1) for arg in args[4:])
    assert keys == {
        "run_name": "nightly-20261201",
        "base_output_directory": "gs://team-bucket/llm",
        "model_name": "default",
        "per_device_batch_size": "8",
        "tokenizer_type": "huggingface",
        "tokenizer_path": HF_PATH,
        "load_parameters_path": ITEMS,
        "max_target_length": "2048",
        "max_prefill_predict_length": "64",
        "return_log_prob": "true",
        "decode_sampling_strategy": "weighted",
        "decode_sampling_temperature": "1.0",
    }
    # Every key is one MaxText knows (base.yml at the pinned commit), none refused by its pyconfig.
    assert set(keys) <= set(maxtext_keys())
    assert container["resources"] == {"limits": {"google.com/tpu": "4"}}
    assert pod["nodeSelector"]["cloud.google.com/gke-tpu-topology"] == "2x2x1"
    assert pod["nodeSelector"]["cloud.google.com/gke-tpu-accelerator"] == "tpu-v5p-slice"


@pytest.mark.parametrize(
    ("tpu_type", "topology", "expected"),
    [("v5e", "1x1", ("1x1", 1)), ("v5e", "2x2", ("2x2", 4)), ("v6e", "8x8", ("2x2", 4)), ("v4", "2x2x4", ("2x2x1", 4))],
)
def test_the_stage_host_is_single_host(tpu_type: str, topology: str, expected: tuple[str, int]) -> None:
    host = stage_host(replace(gke_config(), tpu_type=tpu_type, tpu_topology=topology))
    assert (host.topology, host.chips) == expected


def stage_bytes(stage: str, config: PipelineConfig, step: int = 79) -> bytes:
    """The stage's JobSet as the operator creates it (the same name and labels whichever the runtime)."""
    operator = StageJobSetOperator(task_id=stage, stage=stage)
    operator.configure(config, step)
    name = kube_names.jobset_name(
        dag_id=RUN.dag_id, task_id=stage, run_id=RUN.run_id, map_index=-1, attempt=0, prefix=stage
    )
    labels = kube_names.identity_labels(dag_id=RUN.dag_id, task_id=stage, run_id=RUN.run_id, map_index=-1)
    body = manifests.plain_jobset(operator.build_job(), name=name, namespace="default", labels=labels, stage=stage)
    return json.dumps(body, sort_keys=False).encode()


@pytest.mark.parametrize("stage", ["evaluate", "synthesize"])
def test_local_and_gke_render_the_same_stage_bytes(tmp_path: Path, stage: str) -> None:
    """`runtime` chooses the cluster, not the JobSet: one run configuration, one stage JobSet on both runtimes."""
    config = local_config(tmp_path)
    rendered_by = {runtime: stage_bytes(stage, replace(config, runtime=runtime)) for runtime in ("gke", "local")}
    assert rendered_by["local"] == rendered_by["gke"]
    # And it is the GKE stage JobSet: MaxText's image and command, one single-host v5e 2x2 TPU host.
    pod = json.loads(rendered_by["local"])["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert container["image"] == LOCAL_MAXTEXT_IMAGE
    assert container["command"] == list(LOCAL_EVAL_COMMAND if stage == "evaluate" else LOCAL_SYNTH_COMMAND)
    assert container["resources"] == {"limits": {"google.com/tpu": "4"}}
    assert "env" not in container and "terminationGracePeriodSeconds" not in pod
    assert pod["nodeSelector"] == {
        "cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice",
        "cloud.google.com/gke-tpu-topology": "2x2",
    }
    assert pod["tolerations"] == [{"key": "google.com/tpu", "operator": "Exists", "effect": "NoSchedule"}]
    # Only the single-host pool of the v5e-small cluster matches its node selector, with the 4 chips it asks for
    # (the 4x4 pools are the slices'); test_pipeline_stages_cluster.py sees kube-scheduler place it there.
    fits = [
        n["metadata"]["name"]
        for n in load_description("v5e-small").nodes()
        if pod["nodeSelector"].items() <= n["metadata"]["labels"].items()
        and int(n["status"]["allocatable"].get("google.com/tpu", 0)) >= 4
    ]
    assert fits == ["gke-local-tpu-v5e-4-0"]


def test_the_local_runtime_gives_maxtexts_flags_for_the_local_model(tmp_path: Path) -> None:
    config = local_config(tmp_path)
    items = f"{config.run_directory}/checkpoints/79/items"
    assert evaluate_args(config, 79) == [
        "--runner=lm_eval",
        f"--checkpoint_path={items}",
        "--model_name=default",
        "--hf_path=local/markov-128",
        "--tasks=lambada_openai",
        f"--base_output_directory={tmp_path}",
        f"--run_name={config.run_name}",
        "--max_model_len=32",
        "--tensor_parallel_size=4",
    ]
    args = synthesize_args(config, 79)
    keys = dict(arg.split("=", 1) for arg in args[4:])
    assert keys["max_target_length"] == "32" and keys["max_prefill_predict_length"] == "16"
    assert (keys["tokenizer_type"], keys["tokenizer_path"]) == ("huggingface", "local/markov-128")
    assert set(keys) <= set(maxtext_keys())


def test_gke_without_a_tokenizer_is_refused_before_anything_runs() -> None:
    with pytest.raises(ParamError, match=r"param hf_path: is required on gke"):
        validate_params(GKE, run=RUN)
    with pytest.raises(ParamError, match=r"param hf_path: 'a b' has characters"):
        validate_params({**GKE, "hf_path": "a b"}, run=RUN)
    assert validate_params(GKE, run=RUN, variables={"elastic_training_hf_path": "t/x"}).hf_path == "t/x"


class _TaskInstance:
    def __init__(self, config: PipelineConfig, step: int) -> None:
        self.pulled = {"validate_params": config.to_json(), "validate_checkpoint": {"step": step}}
        self.pushed: dict[str, Any] = {}

    def xcom_pull(self, task_ids: str, key: str = "return_value") -> Any:
        return self.pulled.get(task_ids)

    def xcom_push(self, key: str, value: Any) -> None:
        self.pushed[key] = value


class _Task:
    import logging

    log = logging.getLogger("test.gate")


def gate(config: PipelineConfig, step: int) -> tuple[dict[str, Any], _TaskInstance]:
    ti = _TaskInstance(config, step)
    return gate_on_eval(ti=ti, task=_Task()), ti


def test_the_gate_reads_maxtexts_result_of_the_validated_step(tmp_path: Path) -> None:
    config = local_config(tmp_path, max_eval_loss=2.0)
    results = Path(config.run_directory) / "eval_results"
    results.mkdir(parents=True)
    items = f"{config.run_directory}/checkpoints/79/items"
    (results / "lambada_openai_default_20261201T010000Z.json").write_text(json.dumps(maxtext_result(items, 5.0)))
    (results / "lambada_openai_default_20261201T020000Z.json").write_text(
        json.dumps(maxtext_result(items, 4.0, "20261201T020000Z"))
    )
    other = maxtext_result(f"{config.run_directory}/checkpoints/70/items", 100.0, "20261201T030000Z")
    (results / "lambada_openai_default_20261201T030000Z.json").write_text(json.dumps(other))
    passed, ti = gate(config, 79)
    assert passed["passed"] and passed["loss"] == pytest.approx(math.log(4.0)) and passed["accuracy"] == 61.5
    assert passed["path"].endswith("T020000Z.json") and ti.pushed["metrics"]["perplexity"] == 4.0

    with pytest.raises(AirflowFailException, match=r"evaluation gate failed: loss 1.3863 > max_eval_loss 1.0"):
        gate(replace(config, max_eval_loss=1.0), 79)
    with pytest.raises(AirflowFailException, match=r"no MaxText evaluation result of .*/checkpoints/60/items"):
        gate(config, 60)
    (results / "broken.json").write_text(json.dumps({"benchmark": "x"}))
    with pytest.raises(AirflowFailException, match=r"broken.json is not a MaxText evaluation result: model_name"):
        gate(config, 79)
