"""Headers on every answer: the UI's pages may load only our own scripts and
styles and may not be framed by another site (clickjacking), and no answer may
be sniffed into another content type."""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")

HEADERS = {
    "content-security-policy": CSP,
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",  # for browsers that predate frame-ancestors
    "referrer-policy": "same-origin",  # job ids in page URLs stay on this site
}
RAW = [(name.encode("latin-1"), value.encode("latin-1")) for name, value in HEADERS.items()]


class SecurityHeaders:
    """Pure ASGI (no BaseHTTPMiddleware): it must not buffer event streams."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                # each added unless the response set it (names in ASGI are lower case)
                headers = list(message.get("headers", ()))
                have = {name.lower() for name, _ in headers}
                headers.extend(pair for pair in RAW if pair[0] not in have)
                message["headers"] = headers
            await send(message)

        await self.app(scope, receive, send_with_headers)
