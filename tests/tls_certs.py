"""Certificates for the TLS tests, made at run time: a CA, server certificates for
127.0.0.1 and localhost, and client certificates good and bad, written as PEM files.
A test module makes them once with `write_tls_files(tmp_path_factory.mktemp("tls"))` in a
session-scoped fixture."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

SERVER_SERIAL = 0x5E4E41
RELOADED_SERVER_SERIAL = 0x5E4E42
CLIENT_USER = "tls-alice"  # the CN of `client`
UNKNOWN_USER = "tls-nobody"  # the CN of `unknown_client`: no such user
SAN_CLIENT_CN = "tls-san-cn"  # `san_client`: this CN, and these SANs
SAN_CLIENT_DNS = "tls-san-dns"
SAN_CLIENT_EMAIL = "tls-san@example.com"

Key = ec.EllipticCurvePrivateKey


@dataclass(frozen=True)
class CertPair:
    cert: Path
    key: Path
    serial: int


@dataclass(frozen=True)
class TlsFiles:
    ca: Path
    server: CertPair
    reloaded_server: CertPair  # another certificate for the same names, to reload
    client: CertPair
    unknown_client: CertPair
    san_client: CertPair
    expired_client: CertPair
    self_signed_client: CertPair
    other_ca_client: CertPair  # signed by a CA the broker does not trust


class _Authority:
    def __init__(self, name: str) -> None:
        self.key = _new_key()
        self.name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        now = _now()
        builder = (
            _base(self.name, self.name, self.key, x509.random_serial_number(), now - _DAY, now + 30 * _DAY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(_key_usage(cert_sign=True), critical=True)
        )
        self.cert = builder.sign(self.key, hashes.SHA256())

    def issue(
        self,
        common_name: str,
        usage: x509.ObjectIdentifier,
        names: list[x509.GeneralName] | None = None,
        *,
        serial: int | None = None,
        expired: bool = False,
    ) -> tuple[x509.Certificate, Key]:
        key = _new_key()
        now = _now()
        not_before, not_after = (now - 10 * _DAY, now - _DAY) if expired else (now - _DAY, now + 30 * _DAY)
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
        builder = (
            _base(subject, self.name, key, serial or x509.random_serial_number(), not_before, not_after)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(_key_usage(cert_sign=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()), critical=False)
        )
        if names:
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        return builder.sign(self.key, hashes.SHA256()), key


_DAY = datetime.timedelta(days=1)
_SERVER_NAMES: list[x509.GeneralName] = [
    x509.DNSName("localhost"),
    x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
]


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _new_key() -> Key:
    return ec.generate_private_key(ec.SECP256R1())  # fast to make, and every TLS version takes it


def _base(
    subject: x509.Name,
    issuer: x509.Name,
    key: Key,
    serial: int,
    not_before: datetime.datetime,
    not_after: datetime.datetime,
) -> x509.CertificateBuilder:
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(serial)
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    )


def _key_usage(*, cert_sign: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=not cert_sign,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=cert_sign,
        crl_sign=cert_sign,
        encipher_only=False,
        decipher_only=False,
    )


def _write(directory: Path, name: str, cert: x509.Certificate, key: Key) -> CertPair:
    cert_path, key_path = directory / f"{name}.crt", directory / f"{name}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    key_path.chmod(0o600)
    return CertPair(cert_path, key_path, cert.serial_number)


def write_tls_files(directory: Path) -> TlsFiles:
    """Make every certificate the TLS tests use and write them to `directory`."""
    ca, other_ca = _Authority("Lavin test CA"), _Authority("Some other CA")
    server, client = ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH
    san_names: list[x509.GeneralName] = [x509.DNSName(SAN_CLIENT_DNS), x509.RFC822Name(SAN_CLIENT_EMAIL)]
    self_signed = _Authority(CLIENT_USER)
    ca_path = directory / "ca.crt"
    ca_path.write_bytes(ca.cert.public_bytes(serialization.Encoding.PEM))
    return TlsFiles(
        ca=ca_path,
        server=_write(directory, "server", *ca.issue("localhost", server, _SERVER_NAMES, serial=SERVER_SERIAL)),
        reloaded_server=_write(
            directory, "server2", *ca.issue("localhost", server, _SERVER_NAMES, serial=RELOADED_SERVER_SERIAL)
        ),
        client=_write(directory, "client", *ca.issue(CLIENT_USER, client)),
        unknown_client=_write(directory, "unknown", *ca.issue(UNKNOWN_USER, client)),
        san_client=_write(directory, "san", *ca.issue(SAN_CLIENT_CN, client, san_names)),
        expired_client=_write(directory, "expired", *ca.issue(CLIENT_USER, client, expired=True)),
        self_signed_client=_write(directory, "self-signed", self_signed.cert, self_signed.key),
        other_ca_client=_write(directory, "other-ca", *other_ca.issue(CLIENT_USER, client)),
    )
