"""A throwaway certificate authority for a TLS-secured SuperLink, and the security flags
and connection settings of each side (insecure when there is no TLS)."""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_NAME = "fedram test CA"


@dataclass(frozen=True)
class TlsFiles:
    """PEM files of a TLS-secured SuperLink: the CA certificate that clients trust
    (SuperNodes' ``--root-certificates``, the connection's ``root-certificates``), and
    the SuperLink's own certificate and private key."""

    ca: Path
    cert: Path
    key: Path


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _san(host: str) -> x509.GeneralName:
    """An IP address entry when ``host`` is one, else a DNS name."""
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def _certificate(subject: str, public_key: Any, now: datetime.datetime) -> x509.CertificateBuilder:
    """A certificate issued by the CA, valid from five minutes ago for two days."""
    return (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(_name(CA_NAME))
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=2))
    )


def generate_tls_files(folder: Path, hosts: Iterable[str] = ("127.0.0.1", "localhost")) -> TlsFiles:
    """A throwaway CA and a SuperLink certificate it signs, valid for ``hosts`` (IPs or
    DNS names) for two days, written to ``folder`` (ca.crt, server.pem, server.key)."""
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca = (
        _certificate(CA_NAME, ca_key.public_key(), now)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    server = (
        _certificate("fedram superlink", key.public_key(), now)
        .add_extension(x509.SubjectAlternativeName([_san(h) for h in hosts]), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    folder.mkdir(parents=True, exist_ok=True)
    files = TlsFiles(folder / "ca.crt", folder / "server.pem", folder / "server.key")
    files.ca.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    files.cert.write_bytes(server.public_bytes(serialization.Encoding.PEM))
    files.key.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    files.key.chmod(0o600)
    return files


def security_flags(tls: TlsFiles | None, *, server: bool) -> list[str]:
    """TLS flags of the SuperLink (``server``) or of a SuperNode; ``--insecure`` without
    TLS."""
    if tls is None:
        return ["--insecure"]
    if server:
        return [
            f"--ssl-ca-certfile={tls.ca}",
            f"--ssl-certfile={tls.cert}",
            f"--ssl-keyfile={tls.key}",
        ]
    return [f"--root-certificates={tls.ca}"]


def connection(address: str, tls: TlsFiles | None) -> dict[str, Any]:
    """A SuperLink connection of ``$FLWR_HOME/config.toml`` for ``flwr run``."""
    if tls is None:
        return {"address": address, "insecure": True}
    return {"address": address, "root-certificates": str(tls.ca)}
