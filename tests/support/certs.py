"""Test certificates made with ``cryptography``: a CA, a broker certificate for 127.0.0.1 and
localhost, a client certificate signed by the CA, and a client certificate from a CA the
broker does not trust. All PEM files in one directory."""

from __future__ import annotations

import datetime
import ipaddress
import sys
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


@dataclass(frozen=True)
class Certs:
    ca: Path  # the CA that signs the broker's and the client's certificates
    server_cert: Path
    server_key: Path
    client_cert: Path  # subject CN=client,O=example
    client_key: Path
    rogue_cert: Path  # signed by a CA the broker does not trust
    rogue_key: Path


def _name(cn: str, org: str | None = None) -> x509.Name:
    parts = []
    if org is not None:
        parts.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    parts.append(x509.NameAttribute(NameOID.COMMON_NAME, cn))
    return x509.Name(parts)


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )


def _issue(
    subject: x509.Name,
    key: ec.EllipticCurvePrivateKey,
    issuer: x509.Name,
    issuer_key: ec.EllipticCurvePrivateKey,
    *,
    ca: bool = False,
    sans: list[x509.GeneralName] | None = None,
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if ca:
        builder = builder.add_extension(
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
        builder = builder.add_extension(
            x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False
        )
    else:
        builder = builder.add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()),
            critical=False,
        )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def make_certs(directory: Path) -> Certs:
    directory.mkdir(parents=True, exist_ok=True)

    def pem(name: str, cert: x509.Certificate) -> Path:
        path = directory / name
        path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        return path

    def keyfile(name: str, key: ec.EllipticCurvePrivateKey) -> Path:
        path = directory / name
        _write_key(path, key)
        return path

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("kgroupd test CA")
    ca = _issue(ca_name, ca_key, ca_name, ca_key, ca=True)
    server_key = ec.generate_private_key(ec.SECP256R1())
    server = _issue(
        _name("localhost"),
        server_key,
        ca_name,
        ca_key,
        sans=[
            x509.DNSName("localhost"),
            x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
        ],
    )
    client_key = ec.generate_private_key(ec.SECP256R1())
    client = _issue(_name("client", "example"), client_key, ca_name, ca_key)
    rogue_ca_key = ec.generate_private_key(ec.SECP256R1())
    rogue_ca_name = _name("someone else's CA")
    rogue_key = ec.generate_private_key(ec.SECP256R1())
    rogue = _issue(_name("rogue", "example"), rogue_key, rogue_ca_name, rogue_ca_key)
    return Certs(
        ca=pem("ca.pem", ca),
        server_cert=pem("server.pem", server),
        server_key=keyfile("server.key", server_key),
        client_cert=pem("client.pem", client),
        client_key=keyfile("client.key", client_key),
        rogue_cert=pem("rogue.pem", rogue),
        rogue_key=keyfile("rogue.key", rogue_key),
    )


def main(argv: list[str]) -> int:
    """``python -m tests.support.certs DIR``: write the test certificates into DIR."""
    if len(argv) != 1:
        print("usage: python -m tests.support.certs DIR", file=sys.stderr)
        return 64
    certs = make_certs(Path(argv[0]))
    for name, path in vars(certs).items():
        print(f"{name}: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
