"""connect against a stand-in for the daemon's worker wire: what the real
daemon does not readily do (5xx), and the argument checks. No go needed."""

from __future__ import annotations

import json
import threading
import time
import unittest
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from touba_sdk import NoAnswer, Tool, Worker, connect

from .daemon import POST_TOOL, wait_for
from .helpers import TOOL_REF, request


class StubDaemon:
    """A stand-in for the daemon's worker wire that answers the first takes
    503, then hands out calls once, then none; answers are recorded, the
    first refused 500."""

    def __init__(self, calls: list) -> None:
        self.lock = threading.Lock()
        self.takes = 0
        self.answers: list[dict] = []
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def send(self, status: int, doc: Any) -> None:
                body = json.dumps(doc).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                try:
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # a take the worker cut short when told to stop

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with stub.lock:
                    if self.path == "/workers/v1/take":
                        stub.takes += 1
                        n = stub.takes
                    else:
                        stub.answers.append(body)
                        n = len(stub.answers)
                if self.path != "/workers/v1/take":
                    if n == 1:
                        return self.send(500, {"error": {"code": "Internal", "message": "try again"}})
                    return self.send(200, {"status": "recorded"})
                if n <= 2:
                    return self.send(503, {"error": {"code": "Unavailable", "message": "shutting down"}})
                if n == 3:
                    return self.send(200, {"calls": calls})
                time.sleep(0.02)  # a short long-poll
                return self.send(200, {"calls": []})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class ConnectWireTest(unittest.TestCase):
    def test_5xx_retried_no_answer_and_answer_retry(self) -> None:
        s = StubDaemon([request("a", {"n": 1}), request("b", {"n": 2})])
        self.addCleanup(s.close)

        def run(value: Any, context: Any) -> Any:
            if context["call_id"] == "b":
                raise NoAnswer()
            return value

        logs: list[str] = []
        with Worker(s.url, "t", [Tool(TOOL_REF, run)], take_wait=1, log=logs.append):
            wait_for(lambda: len(s.answers) >= 2, 20, "the answer to be sent again after a 500")
        text = "\n".join(logs)
        self.assertEqual(sum("cannot reach" in line and "503" in line for line in logs), 2, text)
        self.assertTrue(any("connected to" in line and "again" in line for line in logs), text)
        self.assertEqual([a["call_id"] for a in s.answers], ["a", "a"], "b is not answered")
        self.assertEqual(s.answers[1], {"call_id": "a", "ok": True, "output": {"n": 1}})


class KeepAliveDaemon:
    """A stand-in for the daemon's wire over HTTP/1.1 that hands out one
    call per take, n in all, and records the connection (the client's port)
    each answer came over."""

    def __init__(self, n: int) -> None:
        self.lock = threading.Lock()
        self.left = n
        self.ports: list[int] = []
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with stub.lock:
                    if self.path == "/workers/v1/take":
                        calls = [request(f"c{stub.left}", {"n": stub.left})] if stub.left > 0 else []
                        stub.left -= len(calls)
                        doc: Any = {"calls": calls}
                    else:
                        stub.ports.append(self.client_address[1])
                        doc = {"status": "recorded"}
                if self.path == "/workers/v1/take" and not calls:
                    time.sleep(0.02)  # a short long-poll
                body = json.dumps(doc).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                try:
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # a take the worker cut short when told to stop

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class ConnectKeepAliveTest(unittest.TestCase):
    def test_answers_reuse_one_connection(self) -> None:
        # A new TCP connection per answer cost as much as a quick call.
        s = KeepAliveDaemon(5)
        self.addCleanup(s.close)
        with Worker(s.url, "t", [Tool(TOOL_REF, lambda value, context: value)], max_in_flight=1, take_wait=1,
                    log=lambda message: None):
            wait_for(lambda: len(s.ports) >= 5, 20, "every call answered")
        self.assertEqual(len(set(s.ports)), 1, f"answers came over the connections of ports {s.ports}")


class ConnectArgumentsTest(unittest.TestCase):
    def test_bad_arguments_are_type_errors(self) -> None:
        tool = Tool(POST_TOOL, lambda value, context: None)
        for kwargs in ({"url": "localhost:1"}, {"token": ""}, {"tools": []}, {"max_in_flight": 0},
                       {"take_wait": 0}):
            args = {"url": "http://x", "token": "t", "tools": [tool], **kwargs}
            with self.subTest(kwargs), self.assertRaises(TypeError):
                connect(**args)


if __name__ == "__main__":
    unittest.main()
