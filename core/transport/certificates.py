"""What a TLS connection tells about itself: the user name SASL EXTERNAL takes from the
client's verified certificate, and the details the management API shows."""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from typing import Any

from cryptography import x509
from cryptography.x509.oid import NameOID
from lavin.api.errors import ConnectionAccessRefused

# RabbitMQ's ssl_cert_login_san_type values -> the certificate's general name types.
SAN_TYPES: dict[str, Any] = {
    "dns": x509.DNSName,
    "ip": x509.IPAddress,
    "email": x509.RFC822Name,
    "uri": x509.UniformResourceIdentifier,
}


def external_login_name(tls: ssl.SSLObject | None, login_from: str, san_type: str, san_index: int) -> str:
    """The user name SASL EXTERNAL logs in as: a field of the client's verified certificate,
    as RabbitMQ's ssl_cert_login_from reads it. Refused with RabbitMQ's texts otherwise."""
    if tls is None:
        raise ConnectionAccessRefused("EXTERNAL login refused: not a TLS connection")
    der = tls.getpeercert(binary_form=True)
    if not der or not tls.getpeercert():  # binary_form gives unverified certificates too
        raise ConnectionAccessRefused("EXTERNAL login refused: connection peer presented no TLS (x.509) certificate")
    name = _name_in(x509.load_der_x509_certificate(der), login_from, san_type, san_index)
    if not name:
        raise ConnectionAccessRefused("EXTERNAL login refused: no name found")
    return name


def _name_in(certificate: x509.Certificate, login_from: str, san_type: str, san_index: int) -> str | None:
    if login_from == "distinguished_name":
        return certificate.subject.rfc4514_string()
    if login_from == "common_name":
        names = certificate.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
        return str(names[0].value) if names else None
    try:
        extension = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    except x509.ExtensionNotFound:
        return None
    alternative_names = [str(name) for name in extension.value.get_values_for_type(SAN_TYPES[san_type])]
    return alternative_names[san_index] if san_index < len(alternative_names) else None


@dataclass(frozen=True)
class TlsDetails:
    """RabbitMQ's ssl_* and peer_cert_* connection fields."""

    protocol: str  # "tlsv1.3"
    cipher: str
    peer_cert_subject: str | None
    peer_cert_issuer: str | None
    peer_cert_validity: str | None


def tls_details(tls: ssl.SSLObject) -> TlsDetails:
    cipher = tls.cipher()
    subject = issuer = validity = None
    der = tls.getpeercert(binary_form=True)
    if der:
        certificate = x509.load_der_x509_certificate(der)
        subject = certificate.subject.rfc4514_string()
        issuer = certificate.issuer.rfc4514_string()
        validity = f"{_utc(certificate.not_valid_before_utc)} - {_utc(certificate.not_valid_after_utc)}"
    return TlsDetails(
        protocol=(tls.version() or "").lower(),
        cipher=cipher[0] if cipher else "",
        peer_cert_subject=subject,
        peer_cert_issuer=issuer,
        peer_cert_validity=validity,
    )


def _utc(moment: Any) -> str:
    return str(moment.strftime("%Y-%m-%dT%H:%M:%SZ"))
