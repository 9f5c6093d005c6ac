"""RBAC through the official client and kubectl: tokens, rules, 403s, reviews, impersonation."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from elastic_training.local.cluster import LocalCluster
from elastic_training.local.cluster.rbac import Attributes, UserInfo, rule_allows
from elastic_training.local.kubeconfig import write_kubeconfig
from tests.support.cluster_objects import pod
from tests.support.local_cluster import K8s

KUBECTL = shutil.which("kubectl")
needs_kubectl = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed (no `kubectl` on PATH)")
RBAC = "rbac.authorization.k8s.io"
NS = "default"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(workdir=tmp_path_factory.mktemp("rbac"), run_control_plane=False) as running:
        yield running


@pytest.fixture(scope="module")
def rbac(k8s: K8s) -> client.RbacAuthorizationV1Api:
    return client.RbacAuthorizationV1Api(k8s.api_client)


@pytest.fixture(scope="module")
def reader(k8s: K8s, rbac: client.RbacAuthorizationV1Api, cluster: LocalCluster, tmp_path_factory: Any) -> Path:
    """A ServiceAccount bound to a Role that may read pods and their logs, and get one JobSet; its kubeconfig."""
    k8s.core.create_namespaced_service_account(NS, {"metadata": {"name": "reader"}})
    rbac.create_namespaced_role(
        NS,
        {
            "metadata": {"name": "pod-reader"},
            "rules": [
                {"apiGroups": [""], "resources": ["pods", "pods/log"], "verbs": ["get", "list", "watch"]},
                {"apiGroups": ["jobset.x-k8s.io"], "resources": ["jobsets"], "verbs": ["get"],
                 "resourceNames": ["allowed"]},
            ],
        },
    )  # fmt: skip
    rbac.create_namespaced_role_binding(
        NS,
        {
            "metadata": {"name": "reader-reads-pods"},
            "roleRef": {"apiGroup": RBAC, "kind": "Role", "name": "pod-reader"},
            "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": NS}],
        },
    )
    issued = k8s.core.create_namespaced_service_account_token("reader", NS, {"spec": {"expirationSeconds": 3600}})
    path = tmp_path_factory.mktemp("reader") / "kubeconfig"
    return write_kubeconfig(path, cluster.url, issued.status.token, ca_pem=cluster.ca_pem)


def _as(kubeconfig: Path) -> client.CoreV1Api:
    from kubernetes import config

    return client.CoreV1Api(config.new_client_from_config(config_file=str(kubeconfig)))


def _status(error: client.ApiException) -> dict[str, Any]:
    return dict(json.loads(error.body))


# -- rules as a table of cases -------------------------------------------------------------------

USER = UserInfo("u")


@pytest.mark.parametrize(
    ("rule", "attributes", "allowed"),
    [
        ({"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}, ("get", "", "pods", "", "x"), True),
        ({"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}, ("list", "", "pods", "", ""), False),
        ({"apiGroups": [""], "resources": ["pods"], "verbs": ["*"]}, ("delete", "", "pods", "", "x"), True),
        ({"apiGroups": ["*"], "resources": ["*"], "verbs": ["get"]}, ("get", "batch", "jobs", "status", "j"), True),
        ({"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}, ("get", "", "pods", "log", "x"), False),
        ({"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]}, ("get", "", "pods", "log", "x"), True),
        ({"apiGroups": [""], "resources": ["*/log"], "verbs": ["get"]}, ("get", "", "pods", "log", "x"), True),
        ({"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["get"]}, ("get", "", "jobs", "", "x"), False),
        ({"apiGroups": [""], "resources": ["pods"], "verbs": ["get"], "resourceNames": ["a"]},
         ("get", "", "pods", "", "a"), True),
        ({"apiGroups": [""], "resources": ["pods"], "verbs": ["get"], "resourceNames": ["a"]},
         ("get", "", "pods", "", "b"), False),
        ({"apiGroups": [""], "resources": ["pods"], "verbs": ["list"], "resourceNames": ["a"]},
         ("list", "", "pods", "", ""), False),
    ],
)  # fmt: skip
def test_rule_allows(rule: dict[str, Any], attributes: tuple[str, str, str, str, str], allowed: bool) -> None:
    verb, group, resource, subresource, name = attributes
    request = Attributes(USER, verb, True, group, resource, subresource, NS, name)
    assert rule_allows(rule, request) is allowed


@pytest.mark.parametrize(
    ("urls", "path", "allowed"),
    [(["/healthz"], "/healthz", True), (["/apis/*"], "/apis/batch/v1", True), (["/api"], "/apis", False)],
)
def test_non_resource_rules(urls: list[str], path: str, allowed: bool) -> None:
    request = Attributes(USER, "get", False, path=path)
    assert rule_allows({"nonResourceURLs": urls, "verbs": ["get"]}, request) is allowed


# -- over HTTP -----------------------------------------------------------------------------------


def test_the_admin_is_cluster_admin_through_the_bootstrap_binding(rbac: client.RbacAuthorizationV1Api) -> None:
    binding = rbac.read_cluster_role_binding("cluster-admin")
    assert binding.role_ref.name == "cluster-admin"
    assert [(s.kind, s.name) for s in binding.subjects] == [("Group", "system:masters")]
    rules = rbac.read_cluster_role("cluster-admin").rules
    assert [(r.api_groups, r.resources, r.verbs) for r in rules[:1]] == [(["*"], ["*"], ["*"])]


def test_a_service_account_token_is_held_to_its_role(k8s: K8s, reader: Path) -> None:
    k8s.core.create_namespaced_pod(NS, pod("rbac-pod"))
    as_reader = _as(reader)
    assert [p.metadata.name for p in as_reader.list_namespaced_pod(NS).items] == ["rbac-pod"]
    assert as_reader.read_namespaced_pod("rbac-pod", NS).metadata.name == "rbac-pod"
    with pytest.raises(client.ApiException) as caught:
        as_reader.create_namespaced_pod(NS, pod("not-allowed"))
    status = _status(caught.value)
    assert (caught.value.status, status["reason"]) == (403, "Forbidden")
    assert status["message"] == (
        'pods is forbidden: User "system:serviceaccount:default:reader" cannot create resource "pods" in API '
        'group "" in the namespace "default"'
    )
    with pytest.raises(client.ApiException) as caught:
        as_reader.delete_namespaced_pod("rbac-pod", NS)
    assert _status(caught.value)["message"].startswith('pods "rbac-pod" is forbidden: User ')
    with pytest.raises(client.ApiException) as caught:
        as_reader.list_namespace()
    assert _status(caught.value)["message"].endswith('cannot list resource "namespaces" in API group "" at the '
                                                     "cluster scope")  # fmt: skip
    with pytest.raises(client.ApiException) as caught:
        as_reader.list_namespaced_pod("kube-system")
    assert caught.value.status == 403  # a RoleBinding acts in its own namespace only


def test_resource_names_and_subresources(k8s: K8s, reader: Path) -> None:
    custom = client.CustomObjectsApi(_as(reader).api_client)
    with pytest.raises(client.ApiException) as caught:
        custom.get_namespaced_custom_object("jobset.x-k8s.io", "v1alpha2", NS, "jobsets", "other")
    assert _status(caught.value)["message"] == (
        'jobsets.jobset.x-k8s.io "other" is forbidden: User "system:serviceaccount:default:reader" cannot get '
        'resource "jobsets" in API group "jobset.x-k8s.io" in the namespace "default"'
    )
    with pytest.raises(client.ApiException) as caught:  # allowed by name: gets through to a 404
        custom.get_namespaced_custom_object("jobset.x-k8s.io", "v1alpha2", NS, "jobsets", "allowed")
    assert caught.value.status == 404
    with pytest.raises(client.ApiException) as caught:
        custom.list_namespaced_custom_object("jobset.x-k8s.io", "v1alpha2", NS, "jobsets")
    assert caught.value.status == 403  # resourceNames never allow a list


def test_tokens_end_with_their_service_account_or_when_they_are_not_ours(
    k8s: K8s, cluster: LocalCluster, tmp_path: Path
) -> None:
    k8s.core.create_namespaced_service_account(NS, {"metadata": {"name": "short-lived"}})
    token = k8s.core.create_namespaced_service_account_token("short-lived", NS, {"spec": {}}).status.token
    kubeconfig = write_kubeconfig(tmp_path / "kc", cluster.url, token, ca_pem=cluster.ca_pem)
    with pytest.raises(client.ApiException) as caught:
        _as(kubeconfig).list_namespaced_pod(NS)
    assert caught.value.status == 403  # authenticated, no rights
    k8s.core.delete_namespaced_service_account("short-lived", NS)
    with pytest.raises(client.ApiException) as caught:
        _as(kubeconfig).list_namespaced_pod(NS)
    assert caught.value.status == 401
    with pytest.raises(client.ApiException) as caught:
        k8s.core.create_namespaced_service_account_token("reader", NS, {"spec": {"expirationSeconds": 60}})
    assert caught.value.status == 422


def test_self_subject_access_review_and_whoami(k8s: K8s, reader: Path) -> None:
    review = {
        "spec": {"resourceAttributes": {"namespace": NS, "verb": "get", "resource": "pods", "subresource": "log"}}
    }
    as_reader = client.AuthorizationV1Api(_as(reader).api_client)
    answer = as_reader.create_self_subject_access_review(review)
    assert answer.status.allowed is True
    assert 'RoleBinding "reader-reads-pods' in answer.status.reason
    review["spec"]["resourceAttributes"]["verb"] = "delete"
    assert as_reader.create_self_subject_access_review(review).status.allowed is False
    whoami = client.AuthenticationV1Api(_as(reader).api_client).create_self_subject_review({})
    assert whoami.status.user_info.username == "system:serviceaccount:default:reader"
    assert "system:serviceaccounts:default" in whoami.status.user_info.groups


def test_only_the_admin_may_impersonate(k8s: K8s, reader: Path) -> None:
    headers = {"Impersonate-User": "system:serviceaccount:default:reader"}
    api = k8s.api_client
    response = api.call_api(
        "/apis/authentication.k8s.io/v1/selfsubjectreviews", "POST", header_params=headers, body={},
        auth_settings=["BearerToken"], _preload_content=False,
    )  # fmt: skip
    assert json.loads(response.data)["status"]["userInfo"]["username"] == "system:serviceaccount:default:reader"
    with pytest.raises(client.ApiException) as caught:
        _as(reader).api_client.call_api(
            "/api/v1/namespaces/default/pods", "GET", header_params={"Impersonate-User": "admin"},
            auth_settings=["BearerToken"], _preload_content=False,
        )  # fmt: skip
    assert _status(caught.value)["message"] == (
        'users "admin" is forbidden: User "system:serviceaccount:default:reader" cannot impersonate resource '
        '"users" in API group "" at the cluster scope'
    )


def test_discovery_is_open_to_every_authenticated_identity_and_faults_are_not(reader: Path) -> None:
    as_reader = _as(reader)
    assert "pods" in {r.name for r in as_reader.get_api_resources().resources}
    with pytest.raises(client.ApiException) as caught:
        as_reader.api_client.call_api("/_local/faults", "GET", auth_settings=["BearerToken"], _preload_content=False)
    assert _status(caught.value)["message"] == (
        'forbidden: User "system:serviceaccount:default:reader" cannot get path "/_local/faults"'
    )


def test_bindings_are_validated_and_their_role_ref_is_immutable(rbac: client.RbacAuthorizationV1Api) -> None:
    with pytest.raises(client.ApiException) as caught:
        rbac.create_namespaced_role(NS, {"metadata": {"name": "no-verbs"}, "rules": [{"apiGroups": [""],
                                    "resources": ["pods"]}]})  # fmt: skip
    assert caught.value.status == 422
    binding = rbac.read_namespaced_role_binding("reader-reads-pods", NS)
    binding.role_ref.name = "someone-else"
    with pytest.raises(client.ApiException) as caught:
        rbac.replace_namespaced_role_binding("reader-reads-pods", NS, binding)
    assert caught.value.status == 422 and "cannot change roleRef" in _status(caught.value)["message"]


# -- kubectl -------------------------------------------------------------------------------------


def kubectl(kubeconfig: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    assert KUBECTL is not None
    env = {"KUBECONFIG": str(kubeconfig), "KUBECACHEDIR": str(kubeconfig.parent / "kube-cache"), "HOME": "/tmp"}
    done = subprocess.run([KUBECTL, *args], env=env, capture_output=True, text=True, timeout=120, check=False)
    if check and done.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} exited {done.returncode}: {done.stderr}")
    return done


@needs_kubectl
def test_kubectl_auth_can_i_create_token_and_a_forbidden_create(
    cluster: LocalCluster, reader: Path, tmp_path: Path
) -> None:
    admin = cluster.kubeconfig_path
    assert kubectl(admin, "auth", "can-i", "create", "pods").stdout.strip() == "yes"
    sa = "system:serviceaccount:default:reader"
    assert kubectl(admin, "auth", "can-i", "get", "pods", "--as", sa).stdout.strip() == "yes"
    denied = kubectl(admin, "auth", "can-i", "create", "pods", "--as", sa, check=False)
    assert (denied.returncode, denied.stdout.strip()) == (1, "no")
    assert kubectl(admin, "auth", "can-i", "get", "pods", "--subresource=log", "--as", sa).stdout.strip() == "yes"
    assert kubectl(reader, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}").stdout == sa
    token = kubectl(admin, "create", "token", "reader", "--duration=20m").stdout.strip()
    kubeconfig = write_kubeconfig(tmp_path / "kc", cluster.url, token, ca_pem=cluster.ca_pem)
    assert "NAME" in kubectl(kubeconfig, "get", "pods").stdout
    forbidden = kubectl(kubeconfig, "create", "namespace", "not-mine", check=False)
    assert forbidden.returncode == 1
    assert forbidden.stderr.strip() == (
        'Error from server (Forbidden): namespaces is forbidden: User "system:serviceaccount:default:reader" '
        'cannot create resource "namespaces" in API group "" at the cluster scope'
    )
    as_admin_impersonating = kubectl(admin, "create", "namespace", "not-mine", "--as", sa, check=False)
    assert "(Forbidden)" in as_admin_impersonating.stderr
    bindings = kubectl(admin, "get", "rolebindings", "-o", "wide").stdout
    assert bindings.split()[:6] == ["NAME", "ROLE", "AGE", "USERS", "GROUPS", "SERVICEACCOUNTS"]
    assert "Role/pod-reader" in bindings and "default/reader" in bindings


@needs_kubectl
def test_kubectl_typed_creates_send_protobuf_and_are_stored_as_sent(cluster: LocalCluster, k8s: K8s) -> None:
    admin = cluster.kubeconfig_path
    kubectl(admin, "create", "serviceaccount", "bot")
    kubectl(admin, "create", "role", "r", "--verb=get,list", "--resource=pods,pods/log", "--resource-name=a")
    kubectl(admin, "create", "rolebinding", "rb", "--role=r", "--serviceaccount=default:bot", "--user=alice")
    kubectl(admin, "create", "clusterrole", "cr", "--verb=get", "--non-resource-url=/logs/*")
    rbac = client.RbacAuthorizationV1Api(k8s.api_client)
    rule = rbac.read_namespaced_role("r", NS).rules[0]
    assert (rule.api_groups, rule.resources, rule.verbs, rule.resource_names) == (
        [""],
        ["pods", "pods/log"],
        ["get", "list"],
        ["a"],
    )
    binding = rbac.read_namespaced_role_binding("rb", NS)
    assert (binding.role_ref.kind, binding.role_ref.name) == ("Role", "r")
    assert [(s.kind, s.name, s.namespace) for s in binding.subjects] == [
        ("User", "alice", None), ("ServiceAccount", "bot", "default")
    ]  # fmt: skip
    assert rbac.read_cluster_role("cr").rules[0].non_resource_urls == ["/logs/*"]
    bot = "system:serviceaccount:default:bot"
    assert kubectl(admin, "auth", "can-i", "get", "pods/a", "--as", bot).stdout.strip() == "yes"
    assert kubectl(admin, "auth", "can-i", "get", "pods/b", "--as", bot, check=False).stdout.strip() == "no"


def _field(number: int, payload: bytes) -> bytes:
    return bytes([number << 3 | 2, len(payload)]) + payload


def test_protobuf_bodies_decode_and_bad_ones_are_400() -> None:
    from elastic_training.local.cluster.protobuf import MAGIC, decode
    from elastic_training.local.cluster.resources import ApiError

    type_meta = _field(1, b"v1") + _field(2, b"Namespace")
    meta = _field(1, b"team-a") + _field(11, _field(1, b"tier") + _field(2, b"x"))
    body = MAGIC + _field(1, type_meta) + _field(2, _field(1, meta))
    assert decode(body) == {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a",
                                                                                  "labels": {"tier": "x"}}}  # fmt: skip
    for bad in (b"{}", MAGIC + b"\x0a\x7f", MAGIC + b"\x0f"):
        with pytest.raises(ApiError) as caught:
            decode(bad)
        assert caught.value.code == 400
    pod_body = MAGIC + _field(1, _field(1, b"v1") + _field(2, b"Pod"))
    with pytest.raises(ApiError) as caught:
        decode(pod_body)
    assert caught.value.code == 415
