"""The image catalogue: references map to local programs; an unknown image is never pulled (over HTTP)."""

from __future__ import annotations

import re

import pytest
from kubernetes import client

from elastic_training.local import maxtext_env
from elastic_training.local.nodeagent.images import (
    CATALOGUE,
    LOCAL,
    MAXTEXT,
    PATHWAYS_PROXY,
    PATHWAYS_SERVER,
    REAL_MAXTEXT_CPU_ARGS,
    ImagePullError,
    ProgramNotFound,
    find_image,
    repository_of,
)
from elastic_training.operators.pipeline_params import LOCAL_EVAL_COMMAND, LOCAL_SYNTH_COMMAND
from elastic_training.operators.spec import LOCAL_MAXTEXT_IMAGE
from tests.support.local_cluster import K8s
from tests.support.waiting import wait_for


@pytest.mark.parametrize(
    ("image", "repository"),
    [
        ("local", "local"),
        ("gcr.io/p/maxtext:1", "gcr.io/p/maxtext"),
        ("localhost:5000/team/maxtext_jax_stable:2026-11-30", "localhost:5000/team/maxtext_jax_stable"),
        ("us-docker.pkg.dev/p/r/maxtext@sha256:" + "a" * 64, "us-docker.pkg.dev/p/r/maxtext"),
        ("localhost:5000/maxtext", "localhost:5000/maxtext"),
    ],
)
def test_repository_drops_tag_and_digest_but_not_a_registry_port(image: str, repository: str) -> None:
    assert repository_of(image) == repository


@pytest.mark.parametrize(
    ("image", "entry"),
    [
        ("local", LOCAL),
        ("us-docker.pkg.dev/my-project/maxtext/maxtext:2026-11-30", MAXTEXT),
        ("gcr.io/tpu-prod-env-multipod/maxtext_jax_stable:latest", MAXTEXT),
        ("us-docker.pkg.dev/cloud-tpu-v2-images/pathways/server:jax-0.10.0", PATHWAYS_SERVER),
        ("us-docker.pkg.dev/cloud-tpu-v2-images/pathways/proxy_server:latest", PATHWAYS_PROXY),
    ],
)
def test_known_images(image: str, entry: object) -> None:
    assert find_image(image) is entry


@pytest.mark.parametrize("image", ["busybox", "gcr.io/p/pathways/servers:1", "gcr.io/p/mymaxtext:1", "x"])
def test_unknown_image_is_a_pull_error_naming_it(image: str) -> None:
    with pytest.raises(ImagePullError, match=re.escape(f'Failed to pull image "{image}": not found')):
        find_image(image)


def test_maxtext_trainer_keeps_its_arguments_and_accepts_python_or_python3(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(maxtext_env.PYTHON_ENV, "")  # no real MaxText: the stand-in
    args = ["src/maxtext/configs/base.yml", "steps=5", "run_name=r"]
    for interpreter in ("python3", "python", "/usr/bin/python3"):
        argv = MAXTEXT.local_argv([interpreter, "-m", "maxtext.trainers.pre_train.train", *args], True)
        assert argv == ["python", "-u", "-m", "elastic_training.local.workloads.maxtext_train", *args]


def test_real_maxtext_runs_non_elastic_training_when_it_is_there(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(maxtext_env.PYTHON_ENV, "/opt/mt/bin/python")
    args = ["src/maxtext/configs/base.yml", "steps=5", "run_name=r"]
    assert MAXTEXT.local_argv(["python3", "-m", "maxtext.trainers.pre_train.train", *args], True) == [
        *["env", "JAX_PLATFORMS=cpu", "/opt/mt/bin/python", "-u", "-m", "maxtext.trainers.pre_train.train"],
        *args,
        *REAL_MAXTEXT_CPU_ARGS,
    ]
    for elastic in ("elastic_enabled=true", "elastic_enabled=True", "elastic_enabled=1"):
        argv = MAXTEXT.local_argv(["python3", "-m", "maxtext.trainers.pre_train.train", *args, elastic], True)
        assert argv == ["python", "-u", "-m", "elastic_training.local.workloads.maxtext_train", *args, elastic]
    eval_argv = MAXTEXT.local_argv(["python3", "-m", "maxtext.eval.runner.run", "--runner=lm_eval"], True)
    assert eval_argv[3] == "elastic_training.local.workloads.maxtext_eval"  # only the trainer is real


def test_maxtext_images_run_the_eval_and_synthesis_stand_ins_with_their_arguments() -> None:
    flags = ["--runner=lm_eval", "--tasks=lambada_openai"]
    eval_image = find_image("us-docker.pkg.dev/p/r/maxtext-eval:1")
    assert eval_image.local_argv(["python3", "-m", "maxtext.eval.runner.run", *flags], True) == [
        *["python", "-u", "-m", "elastic_training.local.workloads.maxtext_eval"],
        *flags,
    ]
    args = ["--num_samples=2", "--output_directory=/o", "src/maxtext/configs/base.yml", "run_name=r"]
    synth_image = find_image("us-docker.pkg.dev/p/r/maxtext-synthesize:1")
    assert synth_image.local_argv(["python3", "-m", "maxtext_synthesize", *args], True) == [
        *["python", "-u", "-m", "elastic_training.local.workloads.maxtext_synthesize"],
        *args,
    ]


def test_the_local_pipelines_stage_commands_run_the_stand_ins() -> None:
    """The local runtime's evaluation and synthesis: MaxText's commands in the local MaxText image."""
    image = find_image(LOCAL_MAXTEXT_IMAGE)
    assert image.local_argv([*LOCAL_EVAL_COMMAND, "--runner=lm_eval"], True) == [
        *["python", "-u", "-m", "elastic_training.local.workloads.maxtext_eval"],
        "--runner=lm_eval",
    ]
    assert image.local_argv([*LOCAL_SYNTH_COMMAND, "--num_samples=1"], True) == [
        *["python", "-u", "-m", "elastic_training.local.workloads.maxtext_synthesize"],
        "--num_samples=1",
    ]


def test_pathways_images_run_their_entrypoint_with_the_args() -> None:
    flags = ["--server_port=29001", "--node_type=resource_manager"]
    stand_in = ["python", "-u", "-m", "elastic_training.local.workloads.pathways"]
    assert PATHWAYS_SERVER.local_argv(flags, False) == [*stand_in, "server", *flags]
    assert PATHWAYS_PROXY.local_argv(flags[:1], False) == [*stand_in, "proxy", *flags[:1]]


def test_a_program_the_image_does_not_have_is_refused() -> None:
    with pytest.raises(ProgramNotFound, match=re.escape("maxtext has no program for 'python3 -m maxtext.other'")):
        MAXTEXT.local_argv(["python3", "-m", "maxtext.other"], True)
    with pytest.raises(ProgramNotFound, match="pathways-server has no program for 'sh -c true'"):
        PATHWAYS_SERVER.local_argv(["sh", "-c", "true"], True)


def test_every_entry_has_a_distinct_name() -> None:
    assert len({entry.name for entry in CATALOGUE}) == len(CATALOGUE)


def _waiting(k8s: K8s, name: str, init: bool) -> dict[str, str] | None:
    pod = k8s.core.read_namespaced_pod(name, "default")
    statuses = (pod.status.init_container_statuses if init else pod.status.container_statuses) or []
    for status in statuses:
        if status.state and status.state.waiting:
            return {
                "reason": status.state.waiting.reason,
                "message": status.state.waiting.message,
                "p": pod.status.phase,
            }
    return None


def test_unknown_image_waits_in_image_pull_backoff_and_the_pod_stays_pending(k8s: K8s) -> None:
    body = client.V1Pod(
        metadata=client.V1ObjectMeta(name="pull-fails"),
        spec=client.V1PodSpec(
            restart_policy="Never",
            containers=[client.V1Container(name="main", image="busybox:1.36", command=["true"])],
        ),
    )
    k8s.core.create_namespaced_pod("default", body)
    try:
        # ContainerCreating first, then the pull's failure
        pulling = ("ErrImagePull", "ImagePullBackOff")
        waiting = wait_for(
            lambda: (w := _waiting(k8s, "pull-fails", False)) is not None and w["reason"] in pulling and w
        )
        assert waiting["reason"] in pulling

        def backing_off() -> dict[str, str] | None:
            current = _waiting(k8s, "pull-fails", False)
            return current if current is not None and current["reason"] == "ImagePullBackOff" else None

        backoff = wait_for(backing_off)
        assert backoff["message"] == 'Back-off pulling image "busybox:1.36"'
        assert backoff["p"] == "Pending"
    finally:
        k8s.core.delete_namespaced_pod("pull-fails", "default", grace_period_seconds=0)


def test_a_sidecar_that_cannot_be_pulled_keeps_the_main_container_from_starting(k8s: K8s) -> None:
    body = client.V1Pod(
        metadata=client.V1ObjectMeta(name="sidecar-pull-fails"),
        spec=client.V1PodSpec(
            restart_policy="Never",
            init_containers=[
                client.V1Container(name="proxy", image="gcr.io/p/not-pathways:1", restart_policy="Always")
            ],
            containers=[client.V1Container(name="main", image="local", command=["true"])],
        ),
    )
    k8s.core.create_namespaced_pod("default", body)
    try:
        pulling = ("ErrImagePull", "ImagePullBackOff")  # after ContainerCreating
        waiting = wait_for(
            lambda: (w := _waiting(k8s, "sidecar-pull-fails", True)) is not None and w["reason"] in pulling and w
        )
        assert 'Failed to pull image "gcr.io/p/not-pathways:1"' in waiting["message"] or waiting["reason"] == (
            "ImagePullBackOff"
        )
        pod = k8s.core.read_namespaced_pod("sidecar-pull-fails", "default")
        assert pod.status.phase == "Pending"
        assert all(not s.state.running and not s.state.terminated for s in pod.status.container_statuses or [])
    finally:
        k8s.core.delete_namespaced_pod("sidecar-pull-fails", "default", grace_period_seconds=0)
