"""The image allowlist (Airflow Variable `elastic_training_allowed_images`): parsing, component-aware prefix
matching, every container of both operators' JobSets checked, and the refusal coming before any API call."""

from __future__ import annotations

import json
import socket
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from elastic_training.operators.images import (
    ALLOWED_IMAGES_VARIABLE,
    check_images,
    image_allowed,
    manifest_images,
    parse_allowed_images,
)
from elastic_training.operators.manifests import (
    PATHWAYS_PROXY_IMAGE,
    PATHWAYS_SERVER_IMAGE,
    JobSpec,
    elastic_jobset,
    plain_jobset,
)
from elastic_training.operators.spec import ElasticRunSpec, SpecError
from tests.support.hostile_strategies import HOSTILE

ORG = "us-docker.pkg.dev/my-org/"
PATHWAYS = "us-docker.pkg.dev/cloud-tpu-v2-images/pathways/"
SPEC = ElasticRunSpec(
    run_name="llama",
    base_output_directory="gs://runs/x",
    steps=100,
    checkpoint_period=10,
    num_slices=2,
    image=f"{ORG}maxtext:1",
    tpu_type="v5p",
    tpu_topology="2x2x2",
)
GKE = elastic_jobset(SPEC, name="llama-abcdef", namespace="default", labels={})


@pytest.mark.parametrize(
    ("raw", "prefixes"),
    [
        (json.dumps([ORG, PATHWAYS]), (ORG, PATHWAYS)),
        (f"{ORG}\n{PATHWAYS}\n", (ORG, PATHWAYS)),
        (f" {ORG} , {PATHWAYS} ", (ORG, PATHWAYS)),
        ([ORG], (ORG,)),  # a Variable read with deserialize_json
    ],
)
def test_parse(raw: Any, prefixes: tuple[str, ...]) -> None:
    assert parse_allowed_images(raw) == prefixes


@pytest.mark.parametrize("raw", ["", " \n ", "[]", "[1]", '{"a": 1}', "[not json", 5, None, [ORG, 3]])
def test_a_set_variable_that_lists_nothing_fails_closed(raw: Any) -> None:
    with pytest.raises(SpecError) as raised:
        parse_allowed_images(raw)
    assert raised.value.field == ALLOWED_IMAGES_VARIABLE


@pytest.mark.parametrize(
    ("image", "allowed"),
    [
        ("gcr.io/my-org", True),
        ("gcr.io/my-org/maxtext", True),
        ("gcr.io/my-org:1", True),
        ("gcr.io/my-org@sha256:" + "a" * 64, True),
        ("gcr.io/my-org-evil/maxtext", False),
        ("gcr.io/my-organisation", False),
        ("gcr.io/my-or", False),
        ("evil.io/gcr.io/my-org/x", False),
        ("GCR.IO/my-org/x", False),
    ],
)
def test_prefixes_match_whole_components(image: str, allowed: bool) -> None:
    assert image_allowed(image, ("gcr.io/my-org",)) is allowed


@HOSTILE
@given(
    prefix=st.from_regex(r"\A[a-z0-9.-]{1,10}(/[a-z0-9-]{1,8}){0,2}\Z"),
    rest=st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789._-", min_size=1, max_size=10),
)
def test_a_prefix_never_allows_a_longer_name_component(prefix: str, rest: str) -> None:
    assert not image_allowed(prefix + rest, (prefix,))
    assert image_allowed(f"{prefix}/{rest}", (prefix,))
    assert image_allowed(f"{prefix}:{rest}", (prefix,))


def test_every_container_of_the_elastic_jobset_is_checked() -> None:
    images = dict(manifest_images(GKE))
    assert set(images.values()) == {f"{ORG}maxtext:1", PATHWAYS_PROXY_IMAGE, PATHWAYS_SERVER_IMAGE}
    check_images(GKE, None)  # unset: no limit
    check_images(GKE, (ORG, PATHWAYS))
    with pytest.raises(SpecError, match=r"pathways-head/pathways-proxy\) is not allowed"):
        check_images(GKE, (ORG,))
    with pytest.raises(SpecError, match=r"maxtext:1' \(pathways-head/jax-tpu\) is not allowed"):
        check_images(GKE, (PATHWAYS,))


def test_the_plain_jobset_image_is_checked() -> None:
    job = JobSpec(image="docker.io/evil/miner:latest", command=["run"])
    manifest = plain_jobset(job, name="eval-abcdef", namespace="default", labels={}, stage="evaluate")
    with pytest.raises(SpecError, match=r"docker.io/evil/miner:latest' \(main/main\) is not allowed"):
        check_images(manifest, (ORG,))


# ---- in the operators: refused before the first API call ---------------------------------------------------------


class _TaskInstance:
    dag_id, task_id, run_id, map_index = "d", "t", "manual__1", -1

    def xcom_push(self, key: str, value: Any) -> None:
        raise AssertionError("nothing may reach XCom")


def _nowhere(monkeypatch: pytest.MonkeyPatch) -> str:
    """A connection whose server does not answer: any API call would fail as unreachable, not as refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    kubeconfig = {
        "current-context": "c",
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
    }
    monkeypatch.setenv(
        "AIRFLOW_CONN_K8S_NOWHERE", json.dumps({"conn_type": "kubernetes", "extra": {"kube_config": kubeconfig}})
    )
    return "k8s_nowhere"


@pytest.mark.parametrize("which", ["elastic", "plain"])
def test_operators_refuse_a_disallowed_image_before_any_api_call(which: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow.sdk.exceptions import AirflowFailException

    from elastic_training.operators import ElasticJobSetOperator, JobSetOperator

    monkeypatch.setenv(f"AIRFLOW_VAR_{ALLOWED_IMAGES_VARIABLE.upper()}", json.dumps([PATHWAYS, "gcr.io/trusted/"]))
    conn_id = _nowhere(monkeypatch)
    if which == "elastic":
        operator: Any = ElasticJobSetOperator(
            task_id="t",
            run_name="llama",
            base_output_directory="gs://runs/x",
            steps=100,
            checkpoint_period=10,
            num_slices=2,
            image=f"{ORG}maxtext:1",
            tpu_type="v5p",
            tpu_topology="2x2x2",
            kubernetes_conn_id=conn_id,
            deferrable=False,
        )
    else:
        operator = JobSetOperator(
            task_id="t",
            name="eval",
            image=f"{ORG}eval:1",
            command=["python3", "-m", "eval"],
            kubernetes_conn_id=conn_id,
            deferrable=False,
        )
    with pytest.raises(AirflowFailException) as raised:
        operator.execute({"ti": _TaskInstance()})
    message = str(raised.value)
    assert message.startswith("refused before creating anything: image: ")
    assert (
        f"the Airflow Variable {ALLOWED_IMAGES_VARIABLE} allows only images under {PATHWAYS}, gcr.io/trusted/"
        in message
    )


def test_a_malformed_variable_refuses_everything(monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow.sdk.exceptions import AirflowFailException

    from elastic_training.operators import JobSetOperator

    monkeypatch.setenv(f"AIRFLOW_VAR_{ALLOWED_IMAGES_VARIABLE.upper()}", "[oops")
    operator = JobSetOperator(
        task_id="t",
        name="eval",
        image="gcr.io/x/y:1",
        command=["true"],
        kubernetes_conn_id=_nowhere(monkeypatch),
        deferrable=False,
    )
    with pytest.raises(AirflowFailException, match=f"{ALLOWED_IMAGES_VARIABLE}: is not a JSON list"):
        operator.execute({"ti": _TaskInstance()})
