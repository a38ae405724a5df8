"""Reloading the TLS certificates (`lavin ctl reload_tls`, as SIGHUP does): new TLS
connections get the files as they are now, open ones keep theirs. Lavin's own endpoint."""

from __future__ import annotations

from typing import Final

from aiohttp import web
from lavin.management.http.replies import done, error_response
from lavin.management.http.requester import requester
from lavin.transport.tls import TlsCertificates, TlsSetupError

TLS_CERTIFICATES: Final = web.AppKey("tls_certificates", TlsCertificates)

routes = web.RouteTableDef()


@routes.post("/api/tls/reload")
async def reload_certificates(request: web.Request) -> web.Response:
    requester(request).require_administrator()
    certificates = request.app.get(TLS_CERTIFICATES)
    if certificates is None:
        return error_response(400, "bad_request", "TLS is not configured: no tls_cert")
    try:
        certificates.reload()
    except TlsSetupError as exc:
        return error_response(400, "bad_request", f"TLS certificates not reloaded, keeping the current ones: {exc}")
    return done()
