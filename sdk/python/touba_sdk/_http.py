"""The receiving side of a webhook binding (SPEC §2.2, §4.2): the check of the
daemon's X-Signature over the raw body, and a tool served over HTTP as a WSGI
application, the same Tool define_tool serves as a process."""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import threading
import traceback
from collections.abc import Callable, Iterable
from typing import Any

from . import _protocol as p
from ._tool import Tool, _encode_line, _failure

SECRET_ENV = "TOUBA_WEBHOOK_SECRET"
"""The environment variable wsgi_app reads the shared secret from."""

PROTOCOL_HEADER = "Touba-Protocol"
"""The header every answer carries, set to PROTOCOL: what tells the daemon that
the body is a protocol response (SPEC §2.2, §4.2)."""

DEFAULT_MAX_BODY_BYTES = 1 << 20
"""The default bound of a request body: the daemon's default max_payload_bytes."""

CODE_SIGNATURE_INVALID = "SignatureInvalid"
"""401: X-Signature missing, malformed or wrong; nothing ran."""
CODE_PAYLOAD_TOO_LARGE = "HandlerPayloadTooLarge"
"""413: the body is over the limit; nothing ran."""
CODE_METHOD_NOT_ALLOWED = "MethodNotAllowed"
"""405: any method but POST."""
CODE_LENGTH_REQUIRED = "LengthRequired"
"""411: neither a Content-Length nor a server that ends the input itself."""

_SIGNATURE = re.compile(r"sha256=([0-9a-fA-F]{64})")


class ToubaSignatureError(Exception):
    """A refused signature; reason is "missing", "malformed" or "mismatch"."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def verify_signature(raw_body: bytes | bytearray | memoryview | str, signature_header: str | None,
                     secret: str | bytes) -> None:
    """Checks signature_header, the X-Signature value of a request from a
    touba-trigger webhook binding, against raw_body and the binding's shared
    secret (its credentials.hmac_secret); raises ToubaSignatureError unless it
    matches.

    What is signed is the raw request body exactly as it arrived, every byte,
    before any JSON parsing: the header is "sha256=" and the hex HMAC-SHA256
    of the body keyed with the secret (its UTF-8 bytes when a str). The daemon
    writes the hex in lowercase; either case is accepted, as is space around
    the value. The comparison is constant-time (hmac.compare_digest). A str
    body is taken as its UTF-8 bytes, which are the bytes sent only if nothing
    decoded and re-encoded them; a parsed dict cannot be verified (TypeError).
    Same as: printf '%s' "$BODY" | openssl dgst -sha256 -hmac "$SECRET"
    """
    key = secret.encode("utf-8") if isinstance(secret, str) else secret
    if not isinstance(key, bytes) or not key:
        raise TypeError("verify_signature: no secret")
    if isinstance(raw_body, str):
        body = raw_body.encode("utf-8")
    elif isinstance(raw_body, (bytes, bytearray, memoryview)):
        body = bytes(raw_body)
    else:
        raise TypeError("verify_signature: raw_body must be the raw bytes, not a parsed body")
    value = (signature_header or "").strip() if isinstance(signature_header, str) else ""
    if not value:
        raise ToubaSignatureError("missing", "no X-Signature header")
    m = _SIGNATURE.fullmatch(value)
    if m is None:
        raise ToubaSignatureError("malformed", "X-Signature is not sha256=<64 hex digits>")
    want = hmac.new(key, body, hashlib.sha256).digest()
    if not hmac.compare_digest(bytes.fromhex(m.group(1)), want):
        raise ToubaSignatureError("mismatch", "X-Signature does not match the body and the secret")


_STATUS = {200: "200 OK", 400: "400 Bad Request", 401: "401 Unauthorized", 405: "405 Method Not Allowed",
           411: "411 Length Required", 413: "413 Content Too Large", 500: "500 Internal Server Error"}


def wsgi_app(tool: Tool, *, secret: str | bytes | None = None,
             max_body_bytes: int = DEFAULT_MAX_BODY_BYTES) -> Callable[..., Iterable[bytes]]:
    """Returns a WSGI application (PEP 3333, standard library only) that
    serves tool as the target of a webhook binding:

    - a method other than POST: 405;
    - a body over max_body_bytes: 413; no Content-Length (and a server that
      does not end the input itself): 411;
    - X-Signature missing, malformed or wrong: 401, and nothing runs;
    - not a touba-tool-handler-v1 request, or an Idempotency-Key header that
      is not the signed body's effect_id (call_id without an effect): 400
      with HandlerProtocolError;
    - else the tool runs, with context["idempotency_key"] set to the header,
      and the answer is 200 with the protocol response, which the daemon uses
      as is: the receipt, or a business error with ok false and its code.

    The secret is the argument, else the environment variable
    TOUBA_WEBHOOK_SECRET; without one this raises ValueError. Calls run in the
    server's threads, so run must be safe to call concurrently under a
    threading server."""
    if not isinstance(tool, Tool):
        raise TypeError("wsgi_app: want a Tool (Tool(tool_ref, run, ...))")
    key = secret if secret is not None else os.environ.get(SECRET_ENV, "")
    if not key:
        raise ValueError(f"wsgi_app: {tool.tool_ref} has no secret: set {SECRET_ENV} or pass secret=")
    if not isinstance(max_body_bytes, int) or max_body_bytes <= 0:
        raise ValueError("wsgi_app: max_body_bytes is not a positive integer")

    def app(environ: dict, start_response: Callable) -> Iterable[bytes]:
        try:
            status, resp, headers = _serve(tool, key, max_body_bytes, environ)
        except Exception:  # the SDK's own failure: answer catches what run raises
            tool._log(f"http: internal error: {traceback.format_exc()}")
            status, resp, headers = 500, _failure(p.CODE_FAILED, "the handler failed"), []
        body = _encode_line(resp)
        start_response(_STATUS[status], [("Content-Type", "application/json"), ("Content-Length", str(len(body))),
                                         ("Cache-Control", "no-store"), (PROTOCOL_HEADER, p.PROTOCOL), *headers])
        return [body]

    return app


def _serve(tool: Tool, secret: str | bytes, limit: int, environ: dict) -> tuple[int, dict, list]:
    if environ.get("REQUEST_METHOD") != "POST":
        return 405, _failure(CODE_METHOD_NOT_ALLOWED, "only POST is served"), [("Allow", "POST")]
    too_large = _failure(CODE_PAYLOAD_TOO_LARGE, f"request body over {limit} bytes")
    stream = environ["wsgi.input"]
    length = (environ.get("CONTENT_LENGTH") or "").strip()
    if length:
        if not (length.isascii() and length.isdigit()):
            return 400, _failure(p.CODE_PROTOCOL_ERROR, "Content-Length is not a number"), []
        if int(length) > limit:
            return 413, too_large, [("Connection", "close")]
        body = _read(stream, int(length))
        if len(body) < int(length):
            return 400, _failure(p.CODE_PROTOCOL_ERROR, "request body cut short"), []
    elif environ.get("wsgi.input_terminated"):
        body = _read(stream, limit + 1)
        if len(body) > limit:
            return 413, too_large, [("Connection", "close")]
    else:
        return 411, _failure(CODE_LENGTH_REQUIRED, "Content-Length is required"), []
    try:
        verify_signature(body, environ.get("HTTP_X_SIGNATURE"), secret)
    except ToubaSignatureError as err:
        return 401, _failure(CODE_SIGNATURE_INVALID, str(err)), []
    try:
        doc = p.loads(body.decode("utf-8"))
        req = p.parse_request(doc)
    except (ValueError, RecursionError) as err:  # bad UTF-8 or JSON
        return 400, _failure(p.CODE_PROTOCOL_ERROR, f"request is not JSON this handler can read: {type(err).__name__}"), []
    except p.ProtocolError as err:
        return 400, _failure(p.CODE_PROTOCOL_ERROR, str(err)), []
    header = environ.get("HTTP_IDEMPOTENCY_KEY") or None
    effect = req["context"]["effect"]
    want = effect["effect_id"] if effect is not None else req["context"]["call_id"]
    if header is not None and header != want:
        field = "context.effect.effect_id" if effect is not None else "context.call_id"
        return 400, _failure(p.CODE_PROTOCOL_ERROR, f"Idempotency-Key is not the request's {field}"), []
    return 200, tool.answer(doc, threading.Event(), idempotency_key=header), []


def _read(stream: Any, n: int) -> bytes:
    chunks = []
    while n > 0:
        chunk = stream.read(min(n, 65536))
        if not chunk:
            break
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)
