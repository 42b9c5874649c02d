"""The SDK in a real child process, as the host runs it: one-shot without
TOUBA_HANDLER_MODE, line-framed with TOUBA_HANDLER_MODE=persistent."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import unittest

from .helpers import request

HANDLER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "testdata", "echo_handler.py")


class Child:
    """The echo handler started with only what the host passes (PATH, and the
    mode when persistent); stdout lines and stderr are collected by threads."""

    def __init__(self, test: unittest.TestCase, persistent: bool = False) -> None:
        env = {"PATH": os.environ.get("PATH", "")}
        if persistent:
            env["TOUBA_HANDLER_MODE"] = "persistent"
        self.proc = subprocess.Popen([sys.executable, HANDLER], env=env, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        test.addCleanup(self._cleanup)
        self.lines: queue.Queue = queue.Queue()
        self.stderr = b""
        threading.Thread(target=self._pump, daemon=True).start()
        threading.Thread(target=self._pump_err, daemon=True).start()

    def _pump(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def _pump_err(self) -> None:
        for chunk in iter(lambda: self.proc.stderr.read1(4096), b""):
            self.stderr += chunk

    def _cleanup(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            f.close()

    def write(self, data: bytes) -> None:
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def next(self, timeout: float = 10) -> dict:
        line = self.lines.get(timeout=timeout)
        if line is None:
            raise AssertionError(f"no response; stderr: {self.stderr.decode(errors='replace')}")
        return json.loads(line)

    def wait_stderr(self, text: bytes, timeout: float = 10) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.stderr:
            if time.monotonic() > deadline:
                raise AssertionError(f"stderr never showed {text!r}: {self.stderr!r}")
            time.sleep(0.01)


class ProcessTest(unittest.TestCase):
    def test_one_shot_answers_and_exits_without_stdin_closing(self):
        c = Child(self)
        c.write(json.dumps(request("c1", {"linger": True}, effect=True)).encode())
        resp = c.next()
        self.assertTrue(resp["ok"], resp)
        self.assertEqual(resp["output"]["mode"], "one-shot")
        self.assertEqual(resp["effect_receipt"]["effect_id"], "q1:c1")
        self.assertNotIn("call_id", resp)
        self.assertEqual(c.proc.wait(10), 0, "exit despite a lingering thread")

    def test_one_shot_empty_stdin(self):
        c = Child(self)
        c.proc.stdin.close()
        self.assertEqual(c.next()["error"]["code"], "HandlerProtocolError")
        self.assertEqual(c.proc.wait(10), 0)

    def test_persistent_serves_many_calls_on_one_process(self):
        c = Child(self, persistent=True)
        for cid in ("a", "b", "c"):
            c.write(json.dumps(request(cid, {"id": cid})).encode() + b"\n")
        pids, seen = set(), set()
        for _ in range(3):
            resp = c.next()
            self.assertEqual(resp["output"]["mode"], "persistent")
            self.assertEqual(resp["output"]["echo"]["id"], resp["call_id"])
            seen.add(resp["call_id"])
            pids.add(resp["output"]["pid"])
        self.assertEqual(seen, {"a", "b", "c"})
        self.assertEqual(len(pids), 1)
        c.proc.stdin.close()
        self.assertEqual(c.proc.wait(10), 0)

    def test_sigterm_sets_stop_event_and_calls_still_answer(self):
        c = Child(self, persistent=True)
        c.write(json.dumps(request("w", {"wait_for_stop": True})).encode() + b"\n")
        c.wait_stderr(b"waiting")
        c.proc.send_signal(signal.SIGTERM)
        resp = c.next()
        self.assertEqual((resp["call_id"], resp["ok"]), ("w", True))
        self.assertEqual(c.proc.wait(10), 0)

    def test_business_error_in_a_child(self):
        c = Child(self)
        c.write(json.dumps(request("c1", {"fail": "OutOfStock"})).encode())
        self.assertEqual(c.next()["error"]["code"], "OutOfStock")
        self.assertEqual(c.proc.wait(10), 0)


if __name__ == "__main__":
    unittest.main()
