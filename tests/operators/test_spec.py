"""The run spec and its lint: every rule has a case that passes and one that fails, naming the field."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from elastic_training.operators.image_reference import image_reference_error
from elastic_training.operators.spec import (
    DEFAULT_CONFIG_FILE,
    OPERATOR_OWNED_KEYS,
    ElasticRunSpec,
    SpecError,
    lint,
    lint_warnings,
)
from elastic_training.operators.tpu_types import TPU_TYPES

GKE = ElasticRunSpec(
    run_name="llama3-nightly",
    base_output_directory="gs://ml-runs/pretrain",
    steps=1000,
    checkpoint_period=100,
    num_slices=4,
    image="us-docker.pkg.dev/my-project/maxtext/maxtext:2026-11-30",
    tpu_type="v5p",
    tpu_topology="2x2x2",
    maxtext_args={"model_name": "llama3-8b", "per_device_batch_size": "4"},
)
LOCAL = ElasticRunSpec(
    run_name="demo",
    base_output_directory="/tmp/runs",
    steps=40,
    checkpoint_period=10,
    num_slices=2,
    runtime="local",
)


def _lint_error(spec: ElasticRunSpec) -> SpecError | None:
    try:
        lint(spec)
    except SpecError as error:
        return error
    return None


# (id, base, changes, field of the expected error or None when the spec is valid)
CASES: list[tuple[str, ElasticRunSpec, dict[str, Any], str | None]] = [
    ("gke-valid", GKE, {}, None),
    ("local-valid", LOCAL, {}, None),
    ("runtime-unknown", GKE, {"runtime": "k8s"}, "runtime"),
    # run_name: present, DNS-1123 label, <= 63
    ("run-name-digits-dashes", GKE, {"run_name": "2026-11-30-run-7"}, None),
    ("run-name-63", GKE, {"run_name": "a" * 63}, None),
    ("run-name-empty", GKE, {"run_name": ""}, "run_name"),
    ("run-name-64", GKE, {"run_name": "a" * 64}, "run_name"),
    ("run-name-uppercase", GKE, {"run_name": "Llama3"}, "run_name"),
    ("run-name-underscore", GKE, {"run_name": "llama_3"}, "run_name"),
    ("run-name-trailing-dash", GKE, {"run_name": "llama-"}, "run_name"),
    ("run-name-slash", GKE, {"run_name": "a/b"}, "run_name"),
    # base_output_directory: gs:// or absolute, no '..', no whitespace or control characters
    ("output-gs-bucket-only", GKE, {"base_output_directory": "gs://ml-runs"}, None),
    ("output-absolute", GKE, {"base_output_directory": "/mnt/gcs/runs"}, None),
    ("output-empty", GKE, {"base_output_directory": ""}, "base_output_directory"),
    ("output-relative", GKE, {"base_output_directory": "runs/x"}, "base_output_directory"),
    ("output-other-scheme", GKE, {"base_output_directory": "s3://bucket/x"}, "base_output_directory"),
    ("output-dotdot", GKE, {"base_output_directory": "gs://ml-runs/a/../b"}, "base_output_directory"),
    ("output-dotdot-local", LOCAL, {"base_output_directory": "/tmp/../etc"}, "base_output_directory"),
    ("output-space", GKE, {"base_output_directory": "gs://ml-runs/a b"}, "base_output_directory"),
    ("output-newline", GKE, {"base_output_directory": "/tmp/a\nb"}, "base_output_directory"),
    ("output-bad-bucket", GKE, {"base_output_directory": "gs://ML_Runs/x"}, "base_output_directory"),
    ("output-no-bucket", GKE, {"base_output_directory": "gs:///x"}, "base_output_directory"),
    # steps >= 2; checkpoint_period >= 1 and at most steps/2
    ("steps-2", GKE, {"steps": 2, "checkpoint_period": 1}, None),
    ("steps-1", GKE, {"steps": 1, "checkpoint_period": 1}, "steps"),
    ("steps-not-int", GKE, {"steps": "1000"}, "steps"),
    ("steps-bool", GKE, {"steps": True}, "steps"),
    ("period-half", GKE, {"checkpoint_period": 500}, None),
    ("period-over-half", GKE, {"checkpoint_period": 501}, "checkpoint_period"),
    ("period-equals-steps", GKE, {"checkpoint_period": 1000}, "checkpoint_period"),
    ("period-0", GKE, {"checkpoint_period": 0}, "checkpoint_period"),
    # num_slices >= 1 (one slice is valid: pause-resume waits for the replacement slice)
    ("slices-1", GKE, {"num_slices": 1}, None),
    ("slices-0", GKE, {"num_slices": 0}, "num_slices"),
    # elastic_min_slice_count: -1 or 1..slices-1
    ("min-slices-minus-1", GKE, {"elastic_min_slice_count": -1}, None),
    ("min-slices-1", GKE, {"elastic_min_slice_count": 1}, None),
    ("min-slices-n-1", GKE, {"elastic_min_slice_count": 3}, None),
    ("min-slices-n", GKE, {"elastic_min_slice_count": 4}, "elastic_min_slice_count"),
    ("min-slices-0", GKE, {"elastic_min_slice_count": 0}, "elastic_min_slice_count"),
    ("min-slices-minus-2", GKE, {"elastic_min_slice_count": -2}, "elastic_min_slice_count"),
    ("min-slices-one-slice", GKE, {"num_slices": 1, "elastic_min_slice_count": 1}, "elastic_min_slice_count"),
    # budgets; elastic_max_retries counts attempts: >= max_slice_restarts + 1
    ("retries-default", GKE, {"max_slice_restarts": 5, "elastic_max_retries": None}, None),
    ("retries-exact", GKE, {"max_slice_restarts": 5, "elastic_max_retries": 6}, None),
    ("retries-more", GKE, {"max_slice_restarts": 5, "elastic_max_retries": 20}, None),
    ("retries-equal-restarts", GKE, {"max_slice_restarts": 5, "elastic_max_retries": 5}, "elastic_max_retries"),
    ("retries-0", GKE, {"max_slice_restarts": 0, "elastic_max_retries": 0}, "elastic_max_retries"),
    ("slice-restarts-0", GKE, {"max_slice_restarts": 0}, None),
    ("slice-restarts-negative", GKE, {"max_slice_restarts": -1}, "max_slice_restarts"),
    ("jobset-restarts-2", GKE, {"jobset_max_restarts": 2}, None),
    ("jobset-restarts-negative", GKE, {"jobset_max_restarts": -1}, "jobset_max_restarts"),
    ("timeout-1", LOCAL, {"elastic_timeout_seconds": 1}, None),
    ("timeout-0", GKE, {"elastic_timeout_seconds": 0}, "elastic_timeout_seconds"),
    # gke needs image, tpu_type, tpu_topology; the local runtime does not
    ("gke-no-image", GKE, {"image": None}, "image"),
    ("gke-no-tpu-type", GKE, {"tpu_type": None}, "tpu_type"),
    ("gke-no-topology", GKE, {"tpu_topology": None}, "tpu_topology"),
    ("local-topology-without-type", LOCAL, {"tpu_topology": "2x2"}, "tpu_type"),
    ("local-with-tpu", LOCAL, {"tpu_type": "v6e", "tpu_topology": "2x2"}, None),
    # image reference syntax
    ("image-digest", GKE, {"image": "gcr.io/p/maxtext@sha256:" + "a" * 64}, None),
    ("image-port-tag", GKE, {"image": "localhost:5000/maxtext:v1"}, None),
    ("image-plain", GKE, {"image": "maxtext"}, None),
    ("image-space", GKE, {"image": "maxtext latest"}, "image"),
    ("image-shell", GKE, {"image": "maxtext;rm -rf /"}, "image"),
    ("image-dollar", GKE, {"image": "maxtext:$(TAG)"}, "image"),
    ("image-uppercase-path", GKE, {"image": "gcr.io/P/MaxText"}, "image"),
    ("image-empty", GKE, {"image": ""}, "image"),
    ("image-bad-local", LOCAL, {"image": "bad image"}, "image"),
    # TPU types and topologies
    ("tpu-v4", GKE, {"tpu_type": "v4", "tpu_topology": "4x4x8"}, None),
    ("tpu-v4-not-sorted", GKE, {"tpu_type": "v4", "tpu_topology": "8x4x4"}, None),
    ("tpu-v5e", GKE, {"tpu_type": "v5e", "tpu_topology": "4x4"}, None),
    ("tpu-v5litepod", GKE, {"tpu_type": "v5litepod", "tpu_topology": "2x4"}, None),
    ("tpu-v6e-1x1", GKE, {"tpu_type": "v6e", "tpu_topology": "1x1"}, None),
    ("tpu-unknown", GKE, {"tpu_type": "v9z"}, "tpu_type"),
    ("tpu-3d-for-2d", GKE, {"tpu_type": "v6e", "tpu_topology": "2x2x1"}, "tpu_topology"),
    ("tpu-2d-for-3d", GKE, {"tpu_type": "v5p", "tpu_topology": "2x2"}, "tpu_topology"),
    ("tpu-2d-unknown-shape", GKE, {"tpu_type": "v5e", "tpu_topology": "3x3"}, "tpu_topology"),
    ("tpu-3d-not-multiple-of-4", GKE, {"tpu_type": "v5p", "tpu_topology": "4x4x6"}, "tpu_topology"),
    ("tpu-v5p-decreasing", GKE, {"tpu_type": "v5p", "tpu_topology": "8x4x4"}, "tpu_topology"),
    ("tpu-v4-too-many-cubes", GKE, {"tpu_type": "v4", "tpu_topology": "16x16x20"}, "tpu_topology"),
    ("tpu-garbage-topology", GKE, {"tpu_topology": "2by2"}, "tpu_topology"),
    ("tpu-zero-dim", GKE, {"tpu_topology": "0x2x2"}, "tpu_topology"),
    # config file
    ("config-file-custom", GKE, {"config_file": "configs/custom.yml"}, None),
    ("config-file-empty", GKE, {"config_file": ""}, "config_file"),
    ("config-file-with-key", GKE, {"config_file": "a=b"}, "config_file"),
    # maxtext_args
    (
        "args-numbers-bools",
        GKE,
        {"maxtext_args": {"per_device_batch_size": 4, "learning_rate": 1e-4, "gcs_metrics": True}},
        None,
    ),
    ("args-key-not-identifier", GKE, {"maxtext_args": {"model-name": "x"}}, "maxtext_args"),
    ("args-key-with-equals", GKE, {"maxtext_args": {"a=b": "x"}}, "maxtext_args"),
    ("args-value-equals", GKE, {"maxtext_args": {"model_name": "x steps=5"}}, "maxtext_args.model_name"),
    ("args-value-smuggle", GKE, {"maxtext_args": {"model_name": "x=5"}}, "maxtext_args.model_name"),
    ("args-value-space", GKE, {"maxtext_args": {"model_name": "llama 3"}}, "maxtext_args.model_name"),
    ("args-value-tab", GKE, {"maxtext_args": {"model_name": "llama\t3"}}, "maxtext_args.model_name"),
    ("args-value-control", GKE, {"maxtext_args": {"model_name": "llama\x003"}}, "maxtext_args.model_name"),
    ("args-value-empty", GKE, {"maxtext_args": {"model_name": ""}}, "maxtext_args.model_name"),
    ("args-value-nan", GKE, {"maxtext_args": {"learning_rate": float("nan")}}, "maxtext_args.learning_rate"),
    ("args-value-list", GKE, {"maxtext_args": {"model_name": ["a"]}}, "maxtext_args.model_name"),
    ("args-not-mapping", GKE, {"maxtext_args": ["model_name=x"]}, "maxtext_args"),
    (
        "args-single-controller-false",
        GKE,
        {"maxtext_args": {"enable_single_controller": "false"}},
        "maxtext_args.enable_single_controller",
    ),
    (
        "args-single-controller-true",
        GKE,
        {"maxtext_args": {"enable_single_controller": "True"}},
        "maxtext_args.enable_single_controller",
    ),
    (
        "args-checkpointing-false",
        GKE,
        {"maxtext_args": {"enable_checkpointing": False}},
        "maxtext_args.enable_checkpointing",
    ),
    ("args-elastic-false", GKE, {"maxtext_args": {"elastic_enabled": "false"}}, "maxtext_args.elastic_enabled"),
    (
        "args-elastic-other",
        GKE,
        {"maxtext_args": {"elastic_backup_kind": "checkpoint"}},
        "maxtext_args.elastic_backup_kind",
    ),
    (
        "args-save-on-completion-false",
        GKE,
        {"maxtext_args": {"save_checkpoint_on_completion": "false"}},
        "maxtext_args.save_checkpoint_on_completion",
    ),
    ("args-save-on-completion-true", GKE, {"maxtext_args": {"save_checkpoint_on_completion": "true"}}, None),
    ("args-profiler", GKE, {"maxtext_args": {"profiler": "xplane"}}, "maxtext_args.profiler"),
    # elastic_timeout_seconds: at least a worker's restart on GKE; any positive value on local
    ("elastic-timeout-gke-59", GKE, {"elastic_timeout_seconds": 59}, "elastic_timeout_seconds"),
    ("elastic-timeout-gke-60", GKE, {"elastic_timeout_seconds": 60}, None),
    ("elastic-timeout-local-1", LOCAL, {"elastic_timeout_seconds": 1}, None),
    # Pathways images: references, pinned (a jax-<version> tag or a digest), never :latest or untagged
    ("server-image-pinned", GKE, {"pathways_server_image": "us-docker.pkg.dev/p/pathways/server:jax-0.9.2"}, None),
    ("server-image-digest", GKE, {"pathways_server_image": "reg.io/p/server@sha256:" + "f" * 64}, None),
    ("server-image-latest-digest", GKE, {"pathways_server_image": "reg.io/p/s:latest@sha256:" + "f" * 64}, None),
    ("server-image-latest", GKE, {"pathways_server_image": "reg.io/p/server:latest"}, "pathways_server_image"),
    ("server-image-untagged", GKE, {"pathways_server_image": "reg.io:5000/p/server"}, "pathways_server_image"),
    ("server-image-bad", GKE, {"pathways_server_image": "Server:1"}, "pathways_server_image"),
    ("proxy-image-latest", LOCAL, {"pathways_proxy_image": "r.io/p/proxy_server:latest"}, "pathways_proxy_image"),
    ("proxy-image-none", GKE, {"pathways_proxy_image": None}, "pathways_proxy_image"),
    # placement, identity, priority, queue, pull policy
    ("head-pool-valid", GKE, {"head_node_pool": "pathways-cpu"}, None),
    ("head-pool-empty", GKE, {"head_node_pool": ""}, "head_node_pool"),
    ("head-pool-upper", GKE, {"head_node_pool": "CPU"}, "head_node_pool"),
    ("service-account-valid", GKE, {"service_account": "maxtext.gcs-writer"}, None),
    ("service-account-bad", GKE, {"service_account": "ksa@project"}, "service_account"),
    ("service-account-empty", GKE, {"service_account": ""}, "service_account"),
    ("priority-class-valid", GKE, {"priority_class": "medium"}, None),
    ("priority-class-bad", GKE, {"priority_class": "High Priority"}, "priority_class"),
    ("kueue-queue-valid", GKE, {"queue_name": "multislice-queue"}, None),
    ("kueue-queue-bad", GKE, {"queue_name": "team/queue"}, "queue_name"),
    ("kueue-queue-long", GKE, {"queue_name": "q" * 64}, "queue_name"),
    ("pull-policy-valid", GKE, {"image_pull_policy": "IfNotPresent"}, None),
    ("pull-policy-bad", GKE, {"image_pull_policy": "always"}, "image_pull_policy"),
    # trainer and worker env: names, string values, the Pathways wiring kept
    ("trainer-env-valid", GKE, {"trainer_env": {"ENABLE_PATHWAYS_PERSISTENCE": "1"}}, None),
    (
        "trainer-env-int",
        GKE,
        {"trainer_env": {"ENABLE_PATHWAYS_PERSISTENCE": 1}},
        "trainer_env.ENABLE_PATHWAYS_PERSISTENCE",
    ),
    ("trainer-env-name", GKE, {"trainer_env": {"A=B": "1"}}, "trainer_env"),
    ("trainer-env-reserved", GKE, {"trainer_env": {"JAX_PLATFORMS": "cpu"}}, "trainer_env.JAX_PLATFORMS"),
    ("trainer-env-list", GKE, {"trainer_env": ["A=1"]}, "trainer_env"),
    ("worker-env-log-level", GKE, {"worker_env": {"TPU_MIN_LOG_LEVEL": "2"}}, None),
    ("worker-env-reserved", GKE, {"worker_env": {"MEGASCALE_SLICE_ID": "0"}}, "worker_env.MEGASCALE_SLICE_ID"),
    ("worker-env-huge", GKE, {"worker_env": {"X": "x" * 40_000}}, "worker_env.X"),
] + [(f"args-owned-{key}", GKE, {"maxtext_args": {key: "1"}}, f"maxtext_args.{key}") for key in OPERATOR_OWNED_KEYS]


@pytest.mark.parametrize(("base", "changes", "field"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_lint_rule(base: ElasticRunSpec, changes: dict[str, Any], field: str | None) -> None:
    error = _lint_error(dataclasses.replace(base, **changes))
    if field is None:
        assert error is None, f"expected valid, got {error}"
        return
    assert error is not None, "expected a lint error"
    assert error.field == field
    assert str(error) == f"{field}: {error.message}"
    assert error.message  # clear and specific: never empty


def test_every_case_id_is_unique() -> None:
    ids = [c[0] for c in CASES]
    assert len(ids) == len(set(ids))


@pytest.mark.parametrize("key", sorted(OPERATOR_OWNED_KEYS))
def test_owned_key_message_names_the_parameter(key: str) -> None:
    error = _lint_error(dataclasses.replace(GKE, maxtext_args={key: "1"}))
    assert error is not None
    assert f"set it with the operator's {OPERATOR_OWNED_KEYS[key]} parameter" in error.message


def test_messages_explain_the_rule() -> None:
    def message(**changes: Any) -> str:
        error = _lint_error(dataclasses.replace(GKE, **changes))
        assert error is not None
        return error.message

    assert "steps/2 (500)" in message(checkpoint_period=600)
    assert "counts attempts" in message(max_slice_restarts=3, elastic_max_retries=3)
    assert "max_slice_restarts + 1 = 4" in message(max_slice_restarts=3, elastic_max_retries=3)
    assert "1..3" in message(elastic_min_slice_count=4)
    for known in TPU_TYPES:
        assert known in message(tpu_type="v9z")
    assert "Pathways" in message(maxtext_args={"enable_single_controller": "false"})
    assert "'='" in message(maxtext_args={"model_name": "a=b"})
    assert "DNS-1123" in message(run_name="Bad_Name")


def test_first_problem_wins() -> None:
    error = _lint_error(dataclasses.replace(GKE, run_name="", steps=0, image=None))
    assert error is not None and error.field == "run_name"


def test_derived_values_gke() -> None:
    spec = dataclasses.replace(GKE, tpu_type="v5p", tpu_topology="4x4x4", num_slices=2)
    assert spec.run_directory == "gs://ml-runs/pretrain/llama3-nightly"
    assert spec.checkpoint_directory == "gs://ml-runs/pretrain/llama3-nightly/checkpoints"
    assert spec.target_step == 999
    assert spec.chips_per_slice == 64
    assert spec.vms_per_slice == 16
    assert spec.total_chips == 128
    assert spec.effective_elastic_max_retries == spec.max_slice_restarts + 1


def test_derived_values_local() -> None:
    spec = dataclasses.replace(LOCAL, base_output_directory="/tmp/runs/")
    assert spec.run_directory == "/tmp/runs/demo"
    # The local defaults, v5e 4x4 (v5e-16): four hosts of 4 chips a slice.
    assert (spec.vms_per_slice, spec.chips_per_slice, spec.total_chips) == (4, 16, 32)


@pytest.mark.parametrize(
    ("tpu_type", "topology", "accelerator", "chips_per_vm", "vms"),
    [
        ("v4", "2x2x1", "tpu-v4-podslice", 4, 1),
        ("v4", "2x2x4", "tpu-v4-podslice", 4, 4),
        ("v5p", "2x2x1", "tpu-v5p-slice", 4, 1),
        ("v5p", "4x4x8", "tpu-v5p-slice", 4, 32),
        ("v5e", "1x1", "tpu-v5-lite-podslice", 1, 1),
        ("v5e", "2x2", "tpu-v5-lite-podslice", 4, 1),
        ("v5litepod", "4x8", "tpu-v5-lite-podslice", 4, 8),
        ("v6e", "1x1", "tpu-v6e-slice", 1, 1),
        ("v6e", "16x16", "tpu-v6e-slice", 4, 64),
    ],
)
def test_tpu_table(tpu_type: str, topology: str, accelerator: str, chips_per_vm: int, vms: int) -> None:
    tpu = TPU_TYPES[tpu_type]
    assert tpu.gke_accelerator == accelerator
    assert tpu.topology_error(topology) is None
    assert tpu.chips_per_vm_for(topology) == chips_per_vm
    assert tpu.vms_per_slice(topology) == vms


def test_v5litepod_is_v5e() -> None:
    assert TPU_TYPES["v5litepod"] is TPU_TYPES["v5e"]
    assert {t.topology_dims for t in TPU_TYPES.values()} == {2, 3}


def test_maxtext_keys_order_and_content() -> None:
    spec = dataclasses.replace(GKE, elastic_min_slice_count=2, maxtext_args={"model_name": "llama3-8b", "x": True})
    assert spec.maxtext_keys() == [
        "base_output_directory=gs://ml-runs/pretrain",
        "run_name=llama3-nightly",
        "steps=1000",
        "enable_checkpointing=true",
        "checkpoint_period=100",
        "enable_single_controller=True",
        "elastic_enabled=true",
        "elastic_timeout_seconds=300",
        "elastic_max_retries=4",
        "elastic_min_slice_count=2",
        "model_name=llama3-8b",
        "x=true",
    ]
    assert "elastic_min_slice_count" not in " ".join(GKE.maxtext_keys())


def test_maxtext_keys_never_split_when_linted() -> None:
    lint(GKE)
    for arg in GKE.maxtext_keys():
        key, _, value = arg.partition("=")
        assert key.isidentifier() and value and "=" not in value and not any(c.isspace() for c in value)


def test_gke_properties_need_the_accelerator() -> None:
    with pytest.raises(SpecError) as caught:
        _ = dataclasses.replace(GKE, tpu_type=None).vms_per_slice
    assert caught.value.field == "tpu_type"


def test_defaults() -> None:
    assert GKE.config_file == DEFAULT_CONFIG_FILE == "src/maxtext/configs/base.yml"
    assert (GKE.max_slice_restarts, GKE.jobset_max_restarts, GKE.elastic_timeout_seconds) == (3, 0, 300)
    assert GKE.elastic_min_slice_count == -1
    assert GKE.pathways_server_image == "us-docker.pkg.dev/cloud-tpu-v2-images/pathways/server:jax-0.10.2"
    assert GKE.pathways_proxy_image == "us-docker.pkg.dev/cloud-tpu-v2-images/pathways/proxy_server:jax-0.10.2"
    assert GKE.head_node_pool == "cpu-np"
    assert (GKE.service_account, GKE.priority_class, GKE.queue_name, GKE.image_pull_policy) == (None,) * 4
    assert dict(GKE.trainer_env) == dict(GKE.worker_env) == {}


@pytest.mark.parametrize(
    "image",
    ["ubuntu", "ubuntu:24.04", "docker.io/library/ubuntu:latest", "us-docker.pkg.dev/p/r/img_name.x:v-1"],
)
def test_valid_images(image: str) -> None:
    assert image_reference_error(image) is None


@pytest.mark.parametrize("image", ["UBUNTU", "ubuntu:", "ubuntu@sha256:abc", "a//b", "img:tag|x", "-img"])
def test_invalid_images(image: str) -> None:
    assert image_reference_error(image) is not None


def test_a_timeout_shorter_than_a_host_repair_is_warned_about() -> None:
    (warning,) = lint_warnings(GKE)  # MaxText's default, 300 s, waiting for every slice
    assert "elastic_timeout_seconds=300" in warning and "repair" in warning
    assert lint_warnings(dataclasses.replace(GKE, elastic_timeout_seconds=1200)) == []
    assert lint_warnings(dataclasses.replace(GKE, elastic_min_slice_count=2)) == []  # continues on fewer slices
    assert lint_warnings(dataclasses.replace(LOCAL, elastic_timeout_seconds=5)) == []


def test_a_stall_timeout_a_save_on_gcs_can_outlast_is_warned_about() -> None:
    """A burst of 503s delays a save by the clients' backoff (the chaos matrix's --gcs run 14 waited 65 s)."""
    riding = dataclasses.replace(GKE, elastic_timeout_seconds=1200)
    (warning,) = lint_warnings(dataclasses.replace(riding, stall_timeout_seconds=60))
    assert "stall_timeout=60 s on gs://" in warning and "Use 120 s or more" in warning
    assert lint_warnings(dataclasses.replace(riding, stall_timeout_seconds=120)) == []
    assert lint_warnings(riding) == []  # no stall timeout given: the operator's default (30 min)
    assert lint_warnings(dataclasses.replace(LOCAL, stall_timeout_seconds=60)) == []  # local disk: no backoff
