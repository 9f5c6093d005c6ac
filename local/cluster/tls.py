"""The local cluster's serving certificates: a CA made at start, and a server certificate it signs.

Follows what ``kube-apiserver`` does when given no certificates (``--cert-dir``, self-signed serving
certificates for the advertised addresses) and what kubeadm lays out, in small: one CA, one serving
certificate with ``subjectAltName`` ``127.0.0.1`` and ``localhost`` (clients check the SAN, never
the CN, since Go 1.15 and urllib3 2). The CA goes into the kubeconfig as
``certificate-authority-data``, so every client verifies the server; the keys never leave the work
directory and are owner-readable only.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import ssl
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_FILE = "ca.crt"
CERT_FILE = "apiserver.crt"
KEY_FILE = "apiserver.key"
VALIDITY = datetime.timedelta(days=30)
# A certificate dated from "now" fails on a client whose clock is a little behind.
CLOCK_SKEW = datetime.timedelta(minutes=5)


@dataclass(frozen=True)
class ServingCertificates:
    """PEM bytes of the CA certificate, and the server certificate with its private key."""

    ca_pem: bytes
    cert_pem: bytes
    key_pem: bytes

    def write(self, directory: Path) -> tuple[Path, Path, Path]:
        """Write ``ca.crt``, ``apiserver.crt`` and ``apiserver.key`` (the key 0600); returns their paths."""
        directory.mkdir(parents=True, exist_ok=True)
        paths = (directory / CA_FILE, directory / CERT_FILE, directory / KEY_FILE)
        contents = ((self.ca_pem, 0o644), (self.cert_pem, 0o644), (self.key_pem, 0o600))
        for path, (data, mode) in zip(paths, contents, strict=True):
            descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
            with os.fdopen(descriptor, "wb") as handle:
                handle.write(data)
            os.chmod(path, mode)
        return paths

    def server_context(self, directory: Path) -> ssl.SSLContext:
        """A TLS server context serving the certificate (written to ``directory`` for ``ssl`` to load)."""
        _, cert, key = self.write(directory)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(cert, key)
        return context

    def client_context(self) -> ssl.SSLContext:
        """A client context that trusts this CA only and checks the host name."""
        return client_context(self.ca_pem)


def client_context(ca_pem: bytes) -> ssl.SSLContext:
    """A client context that trusts ``ca_pem`` only and checks the host name."""
    context = ssl.create_default_context(cadata=ca_pem.decode("ascii"))
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "elastic-training local cluster"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def generate(hosts: tuple[str, ...] = ("127.0.0.1", "localhost")) -> ServingCertificates:
    """A fresh CA and a serving certificate for ``hosts`` (IP addresses or DNS names), P-256 keys."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("elastic-training-local-ca")
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - CLOCK_SKEW)
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    server_key = ec.generate_private_key(ec.SECP256R1())
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    server_cert = (
        x509.CertificateBuilder()
        .subject_name(_name("kube-apiserver"))
        .issuer_name(ca_name)
        .public_key(server_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - CLOCK_SKEW)
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    return ServingCertificates(
        ca_pem=ca_cert.public_bytes(serialization.Encoding.PEM),
        cert_pem=server_cert.public_bytes(serialization.Encoding.PEM),
        key_pem=server_key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ),
    )
