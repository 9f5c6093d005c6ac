"""Starts and stops the upstream control plane: etcd, kube-apiserver, kube-controller-manager, kube-scheduler, the
JobSet controller and the Kueue controller manager, on loopback, with TLS, tokens, RBAC and the admission chain.

Order: certificates and tokens; etcd; kube-apiserver (ready at ``/readyz``); the ProvisioningRequest CRD and
JobSet's and Kueue's released manifests (CRDs established before their managers start, so Kueue enables its
JobSet integration and its ProvisioningRequest admission checks); kube-controller-manager and kube-scheduler;
the JobSet and Kueue managers (ready once their webhooks listen); then the description's Kueue objects, through
those webhooks. A failure at any step stops whatever started and raises :class:`ProcessError` naming the step.
"""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from elastic_training.local.controlplane import binaries as upstream
from elastic_training.local.controlplane import configs, manifests, pki
from elastic_training.local.controlplane.processes import (
    Component,
    ProcessError,
    free_port,
    https_ok,
    listening,
    wait_until,
)
from elastic_training.local.group_reaper import GroupReaper
from elastic_training.local.kubeconfig import write_kubeconfig

SERVICE_CIDR = "10.96.0.0/16"
KUEUE_NAMESPACE, KUEUE_SECRET = "kueue-system", "kueue-webhook-server-cert"
KUEUE_FEATURE_GATES = "VisibilityOnDemand=false"  # its APIService accepts only a Service, which cannot route here
KUEUE_REFUSAL = "Unable to load the configuration"  # what Kueue's main logs before it exits on a bad Configuration


# On SIGTERM kube-apiserver waits for every open stream to end (its loopback informers' too); etcd holds its state.
APISERVER_STOP_GRACE = 1.0


class KueueConfigurationError(ProcessError, ValueError):
    """The Kueue manager refused its Configuration and exited; the message quotes Kueue's own error."""


@dataclass(frozen=True)
class Ports:
    """Every port the control plane listens on, all on 127.0.0.1."""

    apiserver: int
    etcd_client: int
    etcd_peer: int
    jobset_webhook: int
    kueue_webhook: int

    @classmethod
    def pick(cls, apiserver: int = 0) -> Ports:
        return cls(apiserver or free_port(), free_port(), free_port(), free_port(), free_port())


class ControlPlane:
    """The upstream control plane for one cluster, its files under ``workdir``."""

    def __init__(
        self,
        workdir: Path,
        *,
        port: int = 0,
        kubeconfig_path: Path | None = None,
        kueue_configuration: dict[str, Any] | None = None,
        binaries: upstream.Binaries | None = None,
        progress: Callable[[str], None] | None = None,
        write_user_kubeconfig: bool = True,
        token_webhook_url: str | None = None,
        node_monitor_grace_seconds: int | None = None,
    ) -> None:
        self.workdir = workdir.resolve()
        # kube-controller-manager's --node-monitor-grace-period (its default, 50 s, when None): how long a node's
        # lease may stand still before the node lifecycle controller marks it Unknown. Tests of a lost host set less.
        self.node_monitor_grace_seconds = node_monitor_grace_seconds
        # kube-apiserver's token webhook (GKE's authenticator of Google access tokens), CA the cluster's: None, none
        self.token_webhook_url = token_webhook_url
        self.ports = Ports.pick(port)
        self.kubeconfig_path = (kubeconfig_path or self.workdir / "kubeconfig").resolve()
        self.audit_log_path = self.workdir / "audit.log"
        self._kueue_base = dict(kueue_configuration or {})  # as given: Kueue checks it (configs.kueue_configuration)
        self._binaries = binaries
        self._write_user_kubeconfig = write_user_kubeconfig
        self._progress = progress or (lambda _line: None)
        self.components: dict[str, Component] = {}
        # If this process dies without stopping them (SIGKILL, a crash), the reaper kills every component's group.
        self._reaper = GroupReaper()
        self.identities = configs.identities()
        self.kubeconfigs: dict[str, Path] = {}
        self.timings: dict[str, float] = {}
        self.pki: pki.ClusterPki | None = None

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.ports.apiserver}"

    @property
    def ca_pem(self) -> bytes:
        assert self.pki is not None
        return self.pki.ca.read_bytes()

    def ssl_context(self) -> ssl.SSLContext:
        """A client context that trusts only the cluster's CA."""
        return ssl.create_default_context(cadata=self.ca_pem.decode())

    @property
    def binaries(self) -> upstream.Binaries:
        if self._binaries is None:
            self._binaries = upstream.ensure(self._progress)
        return self._binaries

    def start(self) -> None:
        """Start every component in order; on any failure stop what started and raise :class:`ProcessError`."""
        try:
            self._start_all()
        except BaseException:
            self.stop()
            raise

    def _start_all(self) -> None:
        binaries = self.binaries
        self._reaper.start()
        for folder in ("pki", "etc", "logs"):
            (self.workdir / folder).mkdir(parents=True, exist_ok=True)
        self.pki = pki.create(self.workdir / "pki")
        self._timed("etcd", lambda: self._start_etcd(binaries))
        self._timed("kube-apiserver", lambda: self._start_apiserver(binaries))
        self._write_kubeconfigs()
        self._timed("manifests", self._install_manifests)
        self._timed("kube-controller-manager", lambda: self._start_controller_manager(binaries))
        self._timed("kube-scheduler", lambda: self._start_scheduler(binaries))
        self._timed("jobset", lambda: self._start_jobset(binaries))
        self._timed("kueue", lambda: self._start_kueue(binaries))
        if self._write_user_kubeconfig:  # last: a client that finds it finds every component serving
            self.write_user_kubeconfig()

    def _timed(self, step: str, action: Callable[[], None]) -> None:
        started = time.monotonic()
        action()
        self.timings[step] = time.monotonic() - started
        self._progress(f"{step} ready in {self.timings[step]:.1f} s")

    def stop(self, grace_seconds: float = 5.0) -> None:
        """Stop every component, the last started first."""
        for component in reversed(list(self.components.values())):
            quick = component.name == "kube-apiserver"
            self._stop_component(component, min(grace_seconds, APISERVER_STOP_GRACE) if quick else grace_seconds)
        self._reaper.stop()

    def _stop_component(self, component: Component, grace_seconds: float = 5.0) -> None:
        pid = component.pid
        component.stop(grace_seconds)
        if pid is not None:
            self._reaper.remove(pid)

    def _component(self, name: str, argv: Sequence[str], env: dict[str, str] | None = None) -> Component:
        base = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
        component = Component(name, argv, self.workdir / "logs" / f"{name}.log", {**base, **(env or {})})
        self.components[name] = component
        component.start()
        if component.pid is not None:
            self._reaper.add(component.pid)  # its group: start_new_session made the pid the group id
        return component

    def _start_etcd(self, binaries: upstream.Binaries) -> None:
        client = f"http://127.0.0.1:{self.ports.etcd_client}"
        peer = f"http://127.0.0.1:{self.ports.etcd_peer}"
        etcd = self._component(
            "etcd",
            [
                str(binaries["etcd"]),
                "--name=local",
                f"--data-dir={self.workdir / 'etcd'}",
                f"--listen-client-urls={client}",
                f"--advertise-client-urls={client}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=local={peer}",
                "--unsafe-no-fsync=true",
                "--log-level=warn",
            ],
        )
        wait_until(lambda: https_ok(f"{client}/health"), etcd, 60, "healthy")

    def _start_apiserver(self, binaries: upstream.Binaries) -> None:
        assert self.pki is not None
        etc, keys = self.workdir / "etc", self.pki
        tokens = configs.write_token_file(etc / "tokens.csv", self.identities)
        policy = configs.write_yaml(etc / "audit-policy.yaml", configs.AUDIT_POLICY)
        apiserver = self._component(
            "kube-apiserver",
            [
                str(binaries["kube-apiserver"]),
                f"--etcd-servers=http://127.0.0.1:{self.ports.etcd_client}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={self.ports.apiserver}",
                f"--tls-cert-file={keys.apiserver[0]}",
                f"--tls-private-key-file={keys.apiserver[1]}",
                f"--client-ca-file={keys.ca}",
                f"--token-auth-file={tokens}",
                "--authorization-mode=Node,RBAC",
                f"--service-account-issuer={self.url}",
                f"--service-account-key-file={keys.service_account_public}",
                f"--service-account-signing-key-file={keys.service_account_key}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--endpoint-reconciler-type=none",
                f"--kubelet-client-certificate={keys.kubelet_client[0]}",
                f"--kubelet-client-key={keys.kubelet_client[1]}",
                f"--kubelet-certificate-authority={keys.ca}",
                "--kubelet-preferred-address-types=InternalIP",
                f"--audit-policy-file={policy}",
                f"--audit-log-path={self.audit_log_path}",
                "--audit-log-format=json",
                "--allow-privileged=true",
                "--profiling=false",
                *self._token_webhook_flags(etc),
            ],
        )
        context = ssl.create_default_context(cafile=str(keys.ca))
        wait_until(lambda: https_ok(f"{self.url}/readyz", context), apiserver, 120, "ready at /readyz")

    def _token_webhook_flags(self, etc: Path) -> list[str]:
        """``--authentication-token-webhook-*``: bearer tokens no other authenticator knows go to the webhook as
        ``authentication.k8s.io/v1`` TokenReviews, uncached (a token refused once it expires, as GKE refuses an
        expired Google access token)."""
        if self.token_webhook_url is None:
            return []
        assert self.pki is not None
        webhook = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "token-webhook",
                    "cluster": {"server": self.token_webhook_url, "certificate-authority": str(self.pki.ca)},
                }
            ],
            "users": [{"name": "kube-apiserver", "user": {}}],
            "contexts": [{"name": "token-webhook", "context": {"cluster": "token-webhook", "user": "kube-apiserver"}}],
            "current-context": "token-webhook",
        }
        path = configs.write_yaml(etc / "token-webhook.kubeconfig", webhook)
        return [
            f"--authentication-token-webhook-config-file={path}",
            "--authentication-token-webhook-version=v1",
            "--authentication-token-webhook-cache-ttl=0s",
        ]

    def _write_kubeconfigs(self) -> None:
        self.kubeconfigs = configs.write_kubeconfigs(self.workdir / "etc", self.url, self.ca_pem, self.identities)

    def write_user_kubeconfig(self, faults_url: str | None = None) -> None:
        """The user's kubeconfig at :attr:`kubeconfig_path`: the admin's token, and the fault proxy's context."""
        admin = self.identities["admin"]
        write_kubeconfig(self.kubeconfig_path, self.url, admin.token, ca_pem=self.ca_pem, faults_url=faults_url)

    def kubectl(self, *args: str, stdin: str | None = None, timeout: float = 120) -> str:
        """Run the built kubectl as the cluster admin; raise :class:`ProcessError` with its message on failure."""
        command = [str(self.binaries["kubectl"]), f"--kubeconfig={self.kubeconfigs['admin']}", *args]
        result = subprocess.run(command, input=stdin, capture_output=True, text=True, timeout=timeout, check=False)
        if result.returncode != 0:
            raise ProcessError(f"kubectl {' '.join(args[:3])} failed: {result.stderr.strip()[-500:]}")
        return result.stdout

    def apply(self, documents: Sequence[dict[str, Any]]) -> None:
        """Server-side apply (as Kueue's and JobSet's docs install), as the cluster admin."""
        if documents:
            self.kubectl(
                "apply",
                "--server-side",
                "--force-conflicts",
                "-f",
                "-",
                stdin="\n---\n".join(json.dumps(document) for document in documents),  # JSON is YAML, written fast
            )

    def _install_manifests(self) -> None:
        assert self.pki is not None
        provisioning = manifests.load(upstream.manifest("provisioningrequests-crd.yaml"))
        jobset = manifests.on_loopback(
            manifests.load(upstream.manifest("jobset-manifests.yaml")), self.ports.jobset_webhook, self.ca_pem
        )
        kueue_ca = self.pki.kueue_webhook["ca.crt"]
        kueue = manifests.on_loopback(
            manifests.load(upstream.manifest("kueue-manifests.yaml")), self.ports.kueue_webhook, kueue_ca
        )
        secret = {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "Opaque",
            "metadata": {"name": KUEUE_SECRET, "namespace": KUEUE_NAMESPACE},
            "data": {key: pki.b64(value) for key, value in self.pki.kueue_webhook.items()},
        }
        self.apply([*provisioning, *jobset, *kueue, secret])  # in order: Kueue's Namespace before its Secret
        names = manifests.crds([*provisioning, *jobset, *kueue])
        self.kubectl("wait", "--for=condition=Established", "--timeout=60s", *[f"crd/{n}" for n in names])

    def _start_controller_manager(self, binaries: upstream.Binaries) -> None:
        assert self.pki is not None
        self._component(
            "kube-controller-manager",
            [
                str(binaries["kube-controller-manager"]),
                f"--kubeconfig={self.kubeconfigs['kube-controller-manager']}",
                "--secure-port=0",
                "--leader-elect=false",
                "--use-service-account-credentials=true",
                f"--service-account-private-key-file={self.pki.service_account_key}",
                f"--root-ca-file={self.pki.ca}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--controllers=*",
                # The Job controller's syncs, back-offs and expectations, in its log: a replacement pod it never
                # created (ci40: a deleted worker pod not replaced for 60 s) can then be told from a slow one.
                "--vmodule=job_controller=4,tracking_utils=4,controller_utils=4",
                *self._node_monitor_flags(),
            ],
        ).check_running()

    def _node_monitor_flags(self) -> list[str]:
        grace = self.node_monitor_grace_seconds
        return [] if grace is None else [f"--node-monitor-grace-period={grace}s"]

    def _start_scheduler(self, binaries: upstream.Binaries) -> None:
        self._component(
            "kube-scheduler",
            [
                str(binaries["kube-scheduler"]),
                f"--kubeconfig={self.kubeconfigs['kube-scheduler']}",
                "--secure-port=0",
                "--leader-elect=false",
            ],
        ).check_running()

    def _start_jobset(self, binaries: upstream.Binaries) -> None:
        assert self.pki is not None
        config = configs.write_yaml(
            self.workdir / "etc" / "jobset-config.yaml",
            configs.jobset_configuration(self.ports.jobset_webhook, self.pki.jobset_webhook_dir),
        )
        jobset = self._component(
            "jobset",
            [str(binaries["jobset-controller"]), f"--config={config}", "--zap-log-level=info"],
            {"KUBECONFIG": str(self.kubeconfigs["jobset"])},
        )
        wait_until(lambda: listening(self.ports.jobset_webhook), jobset, 120, "serving its webhooks")

    def kueue_configuration_path(self) -> Path:
        return self.workdir / "etc" / "kueue-config.yaml"

    def _start_kueue(self, binaries: upstream.Binaries) -> None:
        """Start Kueue with :attr:`_kueue_base`; :class:`KueueConfigurationError` when it refuses it and exits."""
        self._mount_kueue_secret()
        log_path = self.workdir / "logs" / "kueue.log"
        offset = log_path.stat().st_size if log_path.exists() else 0  # the log is appended to at each restart
        configs.write_yaml(
            self.kueue_configuration_path(),
            configs.kueue_configuration(
                self._kueue_base, self.ports.kueue_webhook, self.workdir / "kueue-webhook-certs"
            ),
        )
        kueue = self._component(
            "kueue",
            [
                str(binaries["kueue"]),
                f"--config={self.kueue_configuration_path()}",
                f"--feature-gates={KUEUE_FEATURE_GATES}",
                "--zap-log-level=info",
            ],
            {"KUBECONFIG": str(self.kubeconfigs["kueue"])},
        )
        try:
            wait_until(lambda: listening(self.ports.kueue_webhook), kueue, 120, "serving its webhooks")
        except ProcessError as exc:
            refusal = _kueue_refusal(log_path, offset)
            if refusal is None:
                raise
            raise KueueConfigurationError(f"Kueue refused its Configuration: {refusal}") from exc

    def _mount_kueue_secret(self) -> None:
        """Kueue's Deployment mounts its webhook Secret at ``certDir``; its rotator reads the files from there."""
        assert self.pki is not None
        folder = self.workdir / "kueue-webhook-certs"
        folder.mkdir(mode=0o700, exist_ok=True)
        for key, value in self.pki.kueue_webhook.items():
            pki.write_private(folder / key, value)

    def restart_kueue(self, configuration: dict[str, Any]) -> None:
        """Stop the Kueue manager and start it with ``configuration`` (its ConfigMap edited, its pod restarted); if it
        refuses it (:class:`KueueConfigurationError`), start it again with the previous one and raise."""
        previous = self._kueue_base
        self._stop_component(self.components["kueue"])
        self._kueue_base = dict(configuration)
        try:
            self._start_kueue(self.binaries)
        except ProcessError:
            self._stop_component(self.components["kueue"])
            self._kueue_base = previous
            self._start_kueue(self.binaries)
            raise


def _kueue_refusal(log_path: Path, offset: int) -> str | None:
    """Kueue's own error, from the line (JSON) its main logs before it exits on a bad Configuration; None if none."""
    with open(log_path, "rb") as log:
        log.seek(offset)
        lines = [line for line in log.read().decode(errors="replace").splitlines() if KUEUE_REFUSAL in line]
    return str(json.loads(lines[0]).get("error", lines[0])) if lines else None
