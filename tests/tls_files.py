"""A throwaway CA and a listener certificate signed by it, for TLS tests: the
certificate names localhost, 127.0.0.1 and this machine's addresses (the
embedded cluster's actors listen on the node IP)."""

from __future__ import annotations

import datetime
import ipaddress
import socket
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _pem_key(key) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def make_tls_files(directory: Path, *, extra_ips: tuple[str, ...] = ()) -> dict[str, str]:
    """{"cafile", "certfile", "keyfile"}: PEM files in `directory`."""
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (x509.CertificateBuilder().subject_name(_name("rafka test CA")).issuer_name(_name("rafka test CA"))
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .sign(ca_key, hashes.SHA256()))
    ips = {"127.0.0.1", *extra_ips}
    try:
        ips.add(socket.gethostbyname(socket.gethostname()))
    except OSError:
        pass
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder().subject_name(_name("rafka listener")).issuer_name(ca.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName(
                [x509.DNSName("localhost")] + [x509.IPAddress(ipaddress.ip_address(ip)) for ip in sorted(ips)]),
                critical=False)
            .sign(ca_key, hashes.SHA256()))
    files = {"cafile": directory / "ca.pem", "certfile": directory / "listener.pem", "keyfile": directory / "listener.key"}
    files["cafile"].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    files["certfile"].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    files["keyfile"].write_bytes(_pem_key(key))
    files["keyfile"].chmod(0o600)
    return {name: str(path) for name, path in files.items()}
