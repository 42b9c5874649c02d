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
    call per take, n in all (or the given calls, up to each take's max), and
    records each take's max, each answer and the connection (the client's
    port) each answer came over."""

    def __init__(self, n: int, calls: list | None = None) -> None:
        self.lock = threading.Lock()
        self.calls = calls if calls is not None else [request(f"c{i:03d}", {"n": i}) for i in range(n)]
        self.left = len(self.calls)
        self.ports: list[int] = []
        self.maxes: list[int] = []
        self.answered: list[str] = []
        self.one = calls is None  # one call per take
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                got = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with stub.lock:
                    if self.path == "/workers/v1/take":
                        stub.maxes.append(got["max"])
                        first = len(stub.calls) - stub.left
                        calls = stub.calls[first:first + min(got["max"], 1 if stub.one else got["max"])]
                        stub.left -= len(calls)
                        doc: Any = {"calls": calls}
                    else:
                        stub.ports.append(self.client_address[1])
                        stub.answered.append(got["call_id"])
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


class ConnectAheadTest(unittest.TestCase):
    def test_takes_ahead_runs_in_order(self) -> None:
        # max_in_flight more calls are taken than can run, so the next are in
        # hand when one ends; they start in the order taken.
        s = KeepAliveDaemon(0, [request(f"c{i:03d}", {"n": i}) for i in range(12)])
        self.addCleanup(s.close)
        lock = threading.Lock()
        release = threading.Event()
        self.addCleanup(release.set)
        state = {"running": 0, "most": 0}

        def run(value: Any, context: Any) -> Any:
            with lock:
                state["running"] += 1
                state["most"] = max(state["most"], state["running"])
            release.wait(20)
            with lock:
                state["running"] -= 1
            return value

        with Worker(s.url, "t", [Tool(TOOL_REF, run)], max_in_flight=2, take_wait=1, log=lambda message: None):
            # Both counts: four calls taken says nothing of how many started yet,
            # and a release before the second starts would let them run one by one.
            wait_for(lambda: s.left == 8 and state["running"] == 2, 20, "two calls running and two taken ahead")
            release.set()
            wait_for(lambda: len(s.answered) == 12, 20, "every call answered")
        self.assertEqual(s.maxes[0], 4)
        self.assertEqual(state["most"], 2, "at most max_in_flight calls run at once")

        one = KeepAliveDaemon(0, [request(f"c{i:03d}", {"n": i}) for i in range(6)])
        self.addCleanup(one.close)
        order: list[str] = []
        with Worker(one.url, "t", [Tool(TOOL_REF, lambda value, context: order.append(context["call_id"]) or value)],
                    max_in_flight=1, ahead=1, take_wait=1, log=lambda message: None):
            wait_for(lambda: len(one.answered) == 6, 20, "every call answered")
        self.assertEqual(order, sorted(order), "one at a time, in the order taken")
        self.assertEqual(one.maxes[0], 2)

    def test_none_ahead_at_one_or_ahead_zero(self) -> None:
        for kwargs in ({"max_in_flight": 1}, {"max_in_flight": 3, "ahead": 0}):
            s = KeepAliveDaemon(1)
            self.addCleanup(s.close)
            with Worker(s.url, "t", [Tool(TOOL_REF, lambda value, context: value)], take_wait=1,
                        log=lambda message: None, **kwargs):
                wait_for(lambda: len(s.maxes) > 0, 20, "a take")
            self.assertEqual(s.maxes[0], kwargs["max_in_flight"], kwargs)

    def test_call_past_deadline_not_run(self) -> None:
        calls = [request("c000", {"n": 0}), request("c001", {"n": 1})]
        calls[0]["context"]["deadline_unix_ms"] = int(time.time() * 1000) - 1000
        s = KeepAliveDaemon(0, calls)
        self.addCleanup(s.close)
        ran: list[str] = []
        with Worker(s.url, "t", [Tool(TOOL_REF, lambda value, context: ran.append(context["call_id"]) or value)],
                    take_wait=1, log=lambda message: None):
            wait_for(lambda: len(s.answered) == 1, 20, "the call within its deadline answered")
        self.assertEqual(ran, ["c001"])
        self.assertEqual(s.answered, ["c001"])


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
