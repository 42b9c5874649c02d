"""Helpers shared by the SDK's tests."""

from __future__ import annotations

import json
import os
import queue
import threading
import unittest
from typing import Any

from touba_sdk import Tool, serve_persistent

TOOL_REF = "tool:test/Echo"
FINGERPRINT = "sha256:" + "ab" * 32


def request(call_id: str, value: Any, *, effect: bool = False, grants: list | None = None) -> dict:
    """Returns a valid request document; effect adds context.effect."""
    req = {
        "protocol": "touba-tool-handler-v1",
        "operation": "invoke",
        "tool_ref": TOOL_REF,
        "input": value,
        "context": {
            "trigger_ref": "trigger:test/T", "event_id": "evt-1", "queue_id": "q1", "run_id": "r1",
            "call_id": call_id, "attempt": 1, "deadline_unix_ms": 0,
            "grants": ["network"] if grants is None else grants,
        },
    }
    if effect:
        req["context"]["effect"] = {"scope": "q1", "effect_id": f"q1:{call_id}", "fingerprint": FINGERPRINT,
                                    "retry_mode": "idempotency_key", "attempt": 1}
    return req


def error_receipt(resp: dict) -> dict | None:
    """Returns the receipt in error.details, or None."""
    return ((resp.get("error") or {}).get("details") or {}).get("effect_receipt")


class Quiet:
    """A tool log that keeps lines for assertions instead of printing them."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def __call__(self, message: str) -> None:
        self.lines.append(message)

    def text(self) -> str:
        return "\n".join(self.lines)


def answer(tool: Tool, doc: Any, **kwargs: Any) -> dict:
    """Runs one request text through tool and checks the answer is one line."""
    text = doc if isinstance(doc, (str, bytes)) else json.dumps(doc)
    line = tool.handle_line(text, **kwargs)
    assert line.endswith(b"\n") and line.count(b"\n") == 1, line
    return json.loads(line)


class Session:
    """serve_persistent running in a thread on real pipes. send writes a
    request line; next returns the next response, parsed, within a deadline."""

    def __init__(self, test: unittest.TestCase, tool: Tool, stop_event: threading.Event | None = None) -> None:
        in_r, in_w = os.pipe()
        out_r, out_w = os.pipe()
        self._in = os.fdopen(in_w, "wb", buffering=0)
        self._out_w = os.fdopen(out_w, "wb")
        self._lines: queue.Queue = queue.Queue()
        self.error: list[BaseException] = []
        stream_in = self._stream_in = os.fdopen(in_r, "rb")

        def run() -> None:
            try:
                serve_persistent(tool, stream_in, self._out_w, stop_event)
            except BaseException as err:  # noqa: BLE001 - reported to the test
                self.error.append(err)
            finally:
                # stream_in is left to the reader thread, which may still be
                # blocked on it after a stop; closing it here would wait for
                # that read. It ends when close() closes the write end.
                self._out_w.close()

        def pump() -> None:
            with os.fdopen(out_r, "rb") as out:
                for line in out:
                    self._lines.put(line)
            self._lines.put(None)

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()
        threading.Thread(target=pump, daemon=True).start()
        test.addCleanup(self._cleanup)

    def send(self, doc: Any) -> None:
        self._in.write((doc if isinstance(doc, str) else json.dumps(doc)).encode() + b"\n")

    def next(self, timeout: float = 10) -> dict:
        line = self._lines.get(timeout=timeout)
        if line is None:
            raise AssertionError("no more responses")
        resp = json.loads(line)
        assert "call_id" in resp, line
        return resp

    def close(self) -> None:
        if not self._in.closed:
            self._in.close()

    def _cleanup(self) -> None:
        # With the write end closed the reader sees EOF and lets go of the
        # read end, which can then be closed without waiting on its lock.
        self.close()
        self.thread.join(10)
        self._stream_in.close()

    def wait(self, timeout: float = 10) -> None:
        self.thread.join(timeout)
        if self.thread.is_alive():
            raise AssertionError(f"serve_persistent still running after {timeout}s")
