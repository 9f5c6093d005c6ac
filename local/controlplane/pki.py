"""The cluster's certificates, made anew at every start: what kubeadm would make, for loopback only.

One cluster CA signs kube-apiserver's serving certificate, the client certificate it presents to the node agent's
kubelet API, the node agent's serving certificate and the JobSet webhook's. Kueue manages its own webhook
certificate (``internalCertManagement``, its default): it is handed a CA of its own in the Secret it would
otherwise create, so that the certificate it serves also names 127.0.0.1 (see :func:`kueue_webhook_secret`).
The service-account token signer's key pair is written beside them. Keys are written with mode 0600.
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

LOOPBACK_SANS = ("127.0.0.1", "localhost")
# cert-controller keeps a certificate only while it stays valid for this long (its LookaheadInterval, 90 days).
WEBHOOK_VALIDITY = datetime.timedelta(days=365)
CLUSTER_VALIDITY = datetime.timedelta(days=30)


@dataclass(frozen=True)
class KeyPair:
    """A PEM certificate and its PEM private key."""

    cert_pem: bytes
    key_pem: bytes

    def write(self, directory: Path, stem: str) -> tuple[Path, Path]:
        directory.mkdir(parents=True, exist_ok=True)
        cert, key = directory / f"{stem}.crt", directory / f"{stem}.key"
        cert.write_bytes(self.cert_pem)
        write_private(key, self.key_pem)
        return cert, key


def write_private(path: Path, data: bytes) -> None:
    """Write ``data`` to a file only its owner can read (mode 0600)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)


PrivateKey = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey


def _new_key(use_rsa: bool) -> PrivateKey:
    return rsa.generate_private_key(65537, 2048) if use_rsa else ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: PrivateKey) -> bytes:
    # RSA as PKCS #1 ("RSA PRIVATE KEY"): cert-controller's rotator parses its CA key with ParsePKCS1PrivateKey.
    if isinstance(key, rsa.RSAPrivateKey):
        form = serialization.PrivateFormat.TraditionalOpenSSL
    else:
        form = serialization.PrivateFormat.PKCS8
    return key.private_bytes(serialization.Encoding.PEM, form, serialization.NoEncryption())


def _sans(hosts: tuple[str, ...]) -> x509.SubjectAlternativeName:
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return x509.SubjectAlternativeName(names)


class Authority:
    """A certificate authority (P-256, or RSA 2048 with ``use_rsa``) that signs serving and client certificates."""

    def __init__(
        self, common_name: str, validity: datetime.timedelta, *, dns_name: str | None = None, use_rsa: bool = False
    ) -> None:
        self._use_rsa = use_rsa
        self._key = _new_key(use_rsa)
        self._name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
        self._validity = validity
        now = datetime.datetime.now(datetime.UTC)
        builder = self._builder(self._name, self._key.public_key(), now)
        builder = builder.add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        builder = builder.add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=True,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        if dns_name:  # cert-controller verifies its CA against the CA's name as a DNS name
            builder = builder.add_extension(_sans((dns_name,)), critical=False)
        self._cert = builder.sign(self._key, hashes.SHA256())

    def _builder(
        self, subject: x509.Name, public_key: ec.EllipticCurvePublicKey | rsa.RSAPublicKey, now: datetime.datetime
    ) -> x509.CertificateBuilder:
        return (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(self._name)
            .public_key(public_key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + self._validity)
        )

    @property
    def pair(self) -> KeyPair:
        return KeyPair(self._cert.public_bytes(serialization.Encoding.PEM), _key_pem(self._key))

    @property
    def cert_pem(self) -> bytes:
        return self.pair.cert_pem

    def issue(
        self,
        common_name: str,
        *,
        hosts: tuple[str, ...] = (),
        server: bool = False,
        client: bool = False,
        organizations: tuple[str, ...] = (),
    ) -> KeyPair:
        """A certificate for ``hosts`` (serverAuth) and/or a client identity (clientAuth: CN user, O groups)."""
        key = _new_key(self._use_rsa)
        attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, org) for org in organizations]
        subject = x509.Name([*attributes, x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
        builder = self._builder(subject, key.public_key(), datetime.datetime.now(datetime.UTC))
        usages = ([ExtendedKeyUsageOID.SERVER_AUTH] if server else []) + (
            [ExtendedKeyUsageOID.CLIENT_AUTH] if client else []
        )
        builder = builder.add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        builder = builder.add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        if hosts:
            builder = builder.add_extension(_sans(hosts), critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


@dataclass(frozen=True)
class ClusterPki:
    """The files every component starts with, under ``<workdir>/pki``."""

    directory: Path
    ca: Path
    apiserver: tuple[Path, Path]
    kubelet_client: tuple[Path, Path]
    node_agent: tuple[Path, Path]
    faults: tuple[Path, Path]
    jobset_webhook_dir: Path
    service_account_key: Path
    service_account_public: Path
    kueue_webhook: dict[str, bytes]


def create(directory: Path) -> ClusterPki:
    """Make the CA and every certificate and key, written under ``directory``."""
    authority = Authority("elastic-training-local-ca", CLUSTER_VALIDITY)
    ca_path, _ = authority.pair.write(directory, "ca")
    apiserver = authority.issue("kube-apiserver", hosts=(*LOOPBACK_SANS, "kubernetes.default.svc"), server=True)
    kubelet_client = authority.issue("kube-apiserver-kubelet-client", client=True, organizations=("system:masters",))
    node_agent = authority.issue("node-agent", hosts=LOOPBACK_SANS, server=True)
    jobset_dir = directory / "jobset-webhook"
    jobset = authority.issue(
        "jobset-webhook-service.jobset-system.svc",
        hosts=(*LOOPBACK_SANS, "jobset-webhook-service.jobset-system.svc"),
        server=True,
    )
    jobset.write(jobset_dir, "tls")  # tls.crt, tls.key: the names controller-runtime's webhook server reads
    sa_key = ec.generate_private_key(ec.SECP256R1())
    sa_private, sa_public = directory / "service-account.key", directory / "service-account.pub"
    write_private(sa_private, _key_pem(sa_key))
    sa_public.write_bytes(
        sa_key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    return ClusterPki(
        directory=directory,
        ca=ca_path,
        apiserver=apiserver.write(directory, "apiserver"),
        kubelet_client=kubelet_client.write(directory, "apiserver-kubelet-client"),
        node_agent=node_agent.write(directory, "node-agent"),
        faults=authority.issue("fault-proxy", hosts=LOOPBACK_SANS, server=True).write(directory, "fault-proxy"),
        jobset_webhook_dir=jobset_dir,
        service_account_key=sa_private,
        service_account_public=sa_public,
        kueue_webhook=kueue_webhook_secret(),
    )


def kueue_webhook_secret(service: str = "kueue-webhook-service", namespace: str = "kueue-system") -> dict[str, bytes]:
    """The data of the Secret Kueue's cert rotator reads (``ca.crt``, ``ca.key``, ``tls.crt``, ``tls.key``).

    Kueue's rotator (open-policy-agent/cert-controller) keeps a Secret whose CA verifies as ``kueue-ca`` and whose
    certificate verifies for ``<service>.<namespace>.svc``, writes it to its ``certDir`` and injects the CA into
    its webhooks and conversion CRDs. Handed this one, it also serves 127.0.0.1, which the loopback URLs need.
    """
    authority = Authority("kueue-ca", WEBHOOK_VALIDITY, dns_name="kueue-ca", use_rsa=True)
    dns = f"{service}.{namespace}.svc"
    pair = authority.issue(dns, hosts=(dns, *LOOPBACK_SANS), server=True)
    return {
        "ca.crt": authority.cert_pem,
        "ca.key": authority.pair.key_pem,
        "tls.crt": pair.cert_pem,
        "tls.key": pair.key_pem,
    }


def b64(data: bytes) -> str:
    """Base64 text, as Secret data and ``caBundle`` fields hold it."""
    return base64.b64encode(data).decode()
