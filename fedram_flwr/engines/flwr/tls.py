"""A throwaway certificate authority for a TLS-secured SuperLink, and the security flags
and connection settings of each side (insecure when there is no TLS)."""

from __future__ import annotations

import datetime
import ipaddress
import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from fedram_flwr.rundir.nofollow import UnsafePathError, make_folder, refuse, what_is, write_atomic

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
    DNS names) for two days, written to ``folder`` (ca.crt, server.pem, server.key).
    Refused (:class:`~fedram_flwr.rundir.nofollow.UnsafePathError`) when ``folder`` is a
    symbolic link or one of the files is there as anything but a regular file; each is
    written anew (:func:`~fedram_flwr.rundir.nofollow.write_atomic`), never through a
    link."""
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
    files = TlsFiles(folder / "ca.crt", folder / "server.pem", folder / "server.key")
    make_folder(folder)  # never through a link: the private key would go to its target
    for path in (files.ca, files.cert, files.key):
        if os.path.lexists(path) and not stat.S_ISREG(os.lstat(path).st_mode):
            raise refuse(path)  # a FIFO planted there hung the set-up
    write_atomic(files.ca, ca.public_bytes(serialization.Encoding.PEM))
    write_atomic(files.cert, server.public_bytes(serialization.Encoding.PEM))
    secret = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    write_atomic(files.key, secret, mode=0o600)  # never readable by others, even briefly
    return files


def check_tls_files(tls: TlsFiles) -> None:
    """Refuse TLS inputs that are not regular files (a FIFO would hang whoever reads
    it; a folder or a missing file would fail inside Flower's SuperLink):
    :class:`~fedram_flwr.rundir.nofollow.UnsafePathError` naming the file."""
    for field in ("ca", "cert", "key"):
        path = getattr(tls, field)
        try:
            regular = stat.S_ISREG(os.stat(path).st_mode)  # a link to a file is fine
        except OSError as err:
            raise UnsafePathError(f"tls.{field}: {path}: {err.strerror}") from None
        if not regular:
            raise UnsafePathError(
                f"tls.{field}: {path} is {what_is(Path(path))}; TLS files must be regular "
                "files (PEM), which the SuperLink and SuperNodes read"
            )


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
