"""verify_signature and wsgi_app: the receiving side of a webhook binding
(SPEC §4.2)."""

from __future__ import annotations

import hashlib
import hmac
import io
import json
import os
import threading
import unittest
import urllib.error
import urllib.request
from unittest import mock
from wsgiref.simple_server import WSGIRequestHandler, make_server

from touba_sdk import (
    CODE_LENGTH_REQUIRED,
    CODE_METHOD_NOT_ALLOWED,
    CODE_PAYLOAD_TOO_LARGE,
    CODE_PROTOCOL_ERROR,
    CODE_SIGNATURE_INVALID,
    PROTOCOL,
    PROTOCOL_HEADER,
    Tool,
    ToubaHandlerError,
    ToubaSignatureError,
    create_effect_receipt,
    create_tool_result,
    verify_signature,
    wsgi_app,
)

from .helpers import TOOL_REF, Quiet, request

# The published cross-check, the same literal as in the Go and JS SDK tests.
# The signature was computed by openssl, not by the SDK:
#
#   printf '%s' '{"tool_ref":"tool:sdk.test/Echo","input":{"note":"café ✓"}}' \
#     | openssl dgst -sha256 -hmac 'whsec-cross-check-2f7d'
#
# The body is UTF-8 ("é" is c3 a9): the bytes are signed, not characters.
CROSS_BODY = '{"tool_ref":"tool:sdk.test/Echo","input":{"note":"café ✓"}}'
CROSS_SECRET = "whsec-cross-check-2f7d"
CROSS_SIG = "sha256=0ccc32aa8c680aaf8c10389be3f71dd438405a7f5ed35b6c37172f5c6776fb20"

SECRET = "whsec-sdk-http-test"


def sign(secret: str, body: bytes) -> str:
    """The test's own signer, written from SPEC §2.2."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


class VerifySignatureTest(unittest.TestCase):
    def test_openssl_cross_check(self) -> None:
        verify_signature(CROSS_BODY.encode("utf-8"), CROSS_SIG, CROSS_SECRET)
        verify_signature(CROSS_BODY, CROSS_SIG, CROSS_SECRET)
        verify_signature(bytearray(CROSS_BODY.encode("utf-8")), CROSS_SIG, CROSS_SECRET.encode())

    def test_refusals_say_why(self) -> None:
        body = CROSS_BODY.encode("utf-8")
        hexpart = CROSS_SIG[len("sha256="):]
        verify_signature(body, "sha256=" + hexpart.upper(), CROSS_SECRET)
        verify_signature(body, f"  {CROSS_SIG} ", CROSS_SECRET)
        cases = [
            (None, "missing"), ("", "missing"), ("  ", "missing"),
            (hexpart, "malformed"), ("sha1=" + hexpart, "malformed"), ("SHA256=" + hexpart, "malformed"),
            (CROSS_SIG[:-2], "malformed"), (CROSS_SIG + "00", "malformed"), (CROSS_SIG[:-1] + "g", "malformed"),
            ("sha256=" + " ".join([hexpart[:32], hexpart[32:]]), "malformed"),  # bytes.fromhex would skip the space
            (f"{CROSS_SIG}, {CROSS_SIG}", "malformed"),
            (sign("other", body), "mismatch"),
        ]
        for header, reason in cases:
            with self.subTest(header=header):
                with self.assertRaises(ToubaSignatureError) as cm:
                    verify_signature(body, header, CROSS_SECRET)
                self.assertEqual(cm.exception.reason, reason)
        for other in (body + b" ", json.dumps(json.loads(CROSS_BODY)).encode()):  # re-encoded JSON is other bytes
            with self.assertRaises(ToubaSignatureError) as cm:
                verify_signature(other, CROSS_SIG, CROSS_SECRET)
            self.assertEqual(cm.exception.reason, "mismatch")
        with self.assertRaises(TypeError):
            verify_signature(json.loads(CROSS_BODY), CROSS_SIG, CROSS_SECRET)
        with self.assertRaises(TypeError):
            verify_signature(body, CROSS_SIG, "")


class Counting:
    """A run that counts its calls and answers an applied receipt whose ref
    is the idempotency key it saw, or the business error its input asks for."""

    def __init__(self) -> None:
        self.runs = 0
        self.keys: list = []
        self.lock = threading.Lock()

    def __call__(self, value: dict, context) -> object:
        with self.lock:
            self.runs += 1
            self.keys.append(context["idempotency_key"])
        effect = context["effect"]
        if value.get("fail"):
            raise ToubaHandlerError(value["fail"], "refused",
                                    {"effect_receipt": create_effect_receipt(effect, outcome="not_applied")})
        key = context["idempotency_key"]
        receipt = create_effect_receipt(effect, outcome="applied", receipt_ref=f"ref:{key}") if effect else None
        return create_tool_result({"key": key}, receipt)


def call_app(app, body: bytes, *, method: str = "POST", sig: str | None = "", key: str = "",
             length: bool = True, terminated: bool = False) -> tuple[str, dict, dict]:
    environ = {"REQUEST_METHOD": method, "wsgi.input": io.BytesIO(body), "CONTENT_TYPE": "application/json"}
    if length:
        environ["CONTENT_LENGTH"] = str(len(body))
    if terminated:
        environ["wsgi.input_terminated"] = True
    if sig is not None:
        environ["HTTP_X_SIGNATURE"] = sig or sign(SECRET, body)
    if key:
        environ["HTTP_IDEMPOTENCY_KEY"] = key
    got = {}

    def start_response(status, headers):
        got["status"], got["headers"] = status, dict(headers)

    out = b"".join(app(environ, start_response))
    return got["status"], json.loads(out), got["headers"]


class WsgiAppTest(unittest.TestCase):
    def setUp(self) -> None:
        self.run_fn = Counting()
        self.tool = Tool(TOOL_REF, self.run_fn, required_grants=["network"], log=Quiet())
        self.app = wsgi_app(self.tool, secret=SECRET, max_body_bytes=4096)

    def test_what_runs_and_what_is_answered(self) -> None:
        call = json.dumps(request("c1", {}, effect=True)).encode()
        failing = json.dumps(request("c2", {"fail": "ExternalWriteRefused"}, effect=True)).encode()
        no_effect = json.dumps(request("c3", {})).encode()
        big = json.dumps(request("c4", {"pad": "x" * 5000}, effect=True)).encode()
        cases = [
            ("applied", call, {"key": "q1:c1"}, "200 OK", None, True),
            ("no effect, call_id as key", no_effect, {"key": "c3"}, "200 OK", None, True),
            ("business error keeps its code", failing, {"key": "q1:c2"}, "200 OK", "ExternalWriteRefused", True),
            ("GET", b"", {"method": "GET", "sig": None}, "405 Method Not Allowed", CODE_METHOD_NOT_ALLOWED, False),
            ("unsigned", call, {"sig": None}, "401 Unauthorized", CODE_SIGNATURE_INVALID, False),
            ("malformed", call, {"sig": "sha256=xyz"}, "401 Unauthorized", CODE_SIGNATURE_INVALID, False),
            ("tampered", call.replace(b'"c1"', b'"c9"'), {"sig": sign(SECRET, call)}, "401 Unauthorized",
             CODE_SIGNATURE_INVALID, False),
            ("other secret", call, {"sig": sign("other", call)}, "401 Unauthorized", CODE_SIGNATURE_INVALID, False),
            ("too large", big, {}, "413 Content Too Large", CODE_PAYLOAD_TOO_LARGE, False),
            ("too large, streamed", big, {"length": False, "terminated": True}, "413 Content Too Large",
             CODE_PAYLOAD_TOO_LARGE, False),
            ("no length", call, {"length": False}, "411 Length Required", CODE_LENGTH_REQUIRED, False),
            ("streamed", call, {"length": False, "terminated": True, "key": "q1:c1"}, "200 OK", None, True),
            ("not JSON", b"{nope", {}, "400 Bad Request", CODE_PROTOCOL_ERROR, False),
            ("other protocol", call.replace(b"touba-tool-handler-v1", b"v0"), {}, "400 Bad Request",
             CODE_PROTOCOL_ERROR, False),
            ("key not the effect id", call, {"key": "q1:other"}, "400 Bad Request", CODE_PROTOCOL_ERROR, False),
            ("key not the call id", no_effect, {"key": "c9"}, "400 Bad Request", CODE_PROTOCOL_ERROR, False),
        ]
        for name, body, kw, status, code, ran in cases:
            with self.subTest(name):
                before = self.run_fn.runs
                got, resp, headers = call_app(self.app, body, **kw)
                self.assertEqual((got, (resp.get("error") or {}).get("code")), (status, code), resp)
                self.assertEqual(resp["ok"], code is None)
                self.assertEqual(self.run_fn.runs - before, 1 if ran else 0)
                self.assertEqual(headers["Content-Type"], "application/json")
                # The header is what tells the daemon the body is a protocol response.
                self.assertEqual(headers.get(PROTOCOL_HEADER), PROTOCOL)
                if name == "applied":
                    self.assertEqual(resp["effect_receipt"]["outcome"], "applied")
                    self.assertEqual(resp["effect_receipt"]["receipt_ref"], "ref:q1:c1")
                if name == "GET":
                    self.assertEqual(headers["Allow"], "POST")
        self.assertEqual(self.run_fn.keys, ["q1:c1", "c3", "q1:c2", "q1:c1"])

    def test_over_a_real_server(self) -> None:
        class Quiet(WSGIRequestHandler):
            def log_message(self, *args) -> None:
                pass

        server = make_server("127.0.0.1", 0, self.app, handler_class=Quiet)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        self.addCleanup(server.server_close)
        self.addCleanup(server.shutdown)
        url = f"http://127.0.0.1:{server.server_port}/hook"
        body = json.dumps(request("c1", {"note": "café ✓"}, effect=True), ensure_ascii=False).encode()
        req = urllib.request.Request(url, data=body, method="POST", headers={
            "Content-Type": "application/json", "X-Signature": sign(SECRET, body), "Idempotency-Key": "q1:c1"})
        with urllib.request.urlopen(req, timeout=10) as res:
            self.assertEqual(res.status, 200)
            self.assertEqual(res.headers.get("Touba-Protocol"), "touba-tool-handler-v1")
            self.assertEqual(json.loads(res.read())["effect_receipt"]["receipt_ref"], "ref:q1:c1")
        req = urllib.request.Request(url, data=body + b" ", method="POST", headers={"X-Signature": sign(SECRET, body)})
        with self.assertRaises(urllib.error.HTTPError) as cm:
            urllib.request.urlopen(req, timeout=10)
        self.assertEqual(cm.exception.code, 401)
        self.assertEqual(self.run_fn.runs, 1)

    def test_secret_from_environment_and_required(self) -> None:
        with mock.patch.dict(os.environ, {"TOUBA_WEBHOOK_SECRET": SECRET}):
            app = wsgi_app(self.tool)
            status, resp, _ = call_app(app, json.dumps(request("c1", {}, effect=True)).encode())
            self.assertEqual(status, "200 OK", resp)
        with mock.patch.dict(os.environ, {}, clear=True):
            with self.assertRaisesRegex(ValueError, "TOUBA_WEBHOOK_SECRET"):
                wsgi_app(self.tool)
        with self.assertRaises(TypeError):
            wsgi_app(self.run_fn, secret=SECRET)

    def test_process_form_has_no_idempotency_key(self) -> None:
        line = self.tool.handle_line(json.dumps(request("c1", {}, effect=True)))
        self.assertTrue(json.loads(line)["ok"])
        self.assertEqual(self.run_fn.keys, [None])


if __name__ == "__main__":
    unittest.main()
