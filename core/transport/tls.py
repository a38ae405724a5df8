"""The server's TLS settings as an `ssl.SSLContext`, rebuilt from the files on reload."""

from __future__ import annotations

import logging
import ssl

from lavin.config import Config

log = logging.getLogger(__name__)

MIN_VERSIONS = {"1.2": ssl.TLSVersion.TLSv1_2, "1.3": ssl.TLSVersion.TLSv1_3}


class TlsSetupError(Exception):
    """A certificate, key or cipher setting that cannot be used."""


def server_context(config: Config) -> ssl.SSLContext:
    """A server-side context from the tls_* settings: RabbitMQ's verify_peer and
    fail_if_no_peer_cert decide whether a client certificate is asked for and required."""
    if config.tls_cert is None:
        raise TlsSetupError("no tls_cert configured")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = MIN_VERSIONS[config.tls_min_version]
    try:
        if config.tls_ciphers:
            context.set_ciphers(config.tls_ciphers)
    except ssl.SSLError:
        raise TlsSetupError(f"no cipher matches tls_ciphers {config.tls_ciphers!r}") from None
    key = config.tls_key or config.tls_cert
    try:
        context.load_cert_chain(config.tls_cert, config.tls_key)
    except OSError as exc:  # ssl.SSLError is an OSError
        raise TlsSetupError(f"cannot load certificate {config.tls_cert} with key {key}: {_describe(exc)}") from None
    try:
        if config.tls_ca_cert is not None:
            context.load_verify_locations(cafile=config.tls_ca_cert)
    except OSError as exc:
        raise TlsSetupError(f"cannot load CA certificates {config.tls_ca_cert}: {_describe(exc)}") from None
    if config.tls_verify_peer:
        context.verify_mode = ssl.CERT_REQUIRED if config.tls_fail_if_no_peer_cert else ssl.CERT_OPTIONAL
    return context


# OpenSSL's reasons for a file it cannot use, in words.
LOAD_FAILURES = {
    "PEM_LIB": "not a PEM certificate or key",
    "KEY_VALUES_MISMATCH": "the key does not match the certificate",
    "NO_CERTIFICATE_OR_CRL_FOUND": "no certificate in the file",
}


def _describe(exc: OSError) -> str:
    if isinstance(exc, ssl.SSLError):
        return LOAD_FAILURES.get(str(exc.reason), str(exc.reason or exc))
    return exc.strerror or str(exc)


class TlsCertificates:
    """The context new TLS connections are made with. `reload` reads the files again; a
    connection already open keeps the context it was made with."""

    def __init__(self, config: Config) -> None:
        self._config = config
        self.context = server_context(config)

    def reload(self) -> None:
        """Take the files as they are now; on failure keep the current context and raise."""
        try:
            self.context = server_context(self._config)
        except TlsSetupError as exc:
            log.error("TLS certificates not reloaded, keeping the current ones: %s", exc)
            raise
        log.info("TLS certificates reloaded")
