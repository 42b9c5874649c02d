"""Persistent mode (SPEC §4.1): one request per line, each call in its own
thread, each answer one line carrying the request's call_id."""

from __future__ import annotations

import threading
import unittest

from touba_sdk import Tool, create_effect_receipt, create_tool_result

from .helpers import TOOL_REF, Quiet, Session, request


class Gates:
    """A run that waits until release(call_id), so a test decides the order
    in which calls finish."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._gates: dict[str, threading.Event] = {}

    def _gate(self, call_id: str) -> threading.Event:
        with self._lock:
            return self._gates.setdefault(call_id, threading.Event())

    def release(self, call_id: str) -> None:
        self._gate(call_id).set()

    def run(self, value, context):
        if not self._gate(context["call_id"]).wait(10):
            raise RuntimeError("gate never opened")
        receipt = None
        if context["effect"] is not None:
            receipt = create_effect_receipt(context["effect"], outcome="applied", receipt_ref=f"r:{context['call_id']}")
        return create_tool_result({"call": context["call_id"]}, receipt)


class PersistentTest(unittest.TestCase):
    def test_answers_in_finishing_order_with_call_ids(self):
        gates = Gates()
        s = Session(self, Tool(TOOL_REF, gates.run, log=Quiet()))
        s.send(request("a", {}, effect=True))
        s.send(request("b", {}, effect=True))
        s.send(request("c", {}))
        gates.release("b")
        first = s.next()
        self.assertEqual(first["call_id"], "b")
        self.assertEqual(first["effect_receipt"]["effect_id"], "q1:b", "each call's receipt is its own")
        gates.release("c")
        self.assertEqual(s.next()["call_id"], "c")
        gates.release("a")
        last = s.next()
        self.assertEqual(last["call_id"], "a")
        self.assertEqual(last["output"], {"call": "a"})
        s.close()
        s.wait()
        self.assertEqual(s.error, [])

    def test_end_of_input_waits_for_calls_in_flight(self):
        gates = Gates()
        s = Session(self, Tool(TOOL_REF, gates.run, log=Quiet()))
        s.send(request("slow", {}))
        s.close()
        s.thread.join(0.2)
        self.assertTrue(s.thread.is_alive(), "serve_persistent ended with a call in flight")
        gates.release("slow")
        self.assertEqual(s.next()["call_id"], "slow")
        s.wait()

    def test_bad_lines_are_answered(self):
        s = Session(self, Tool(TOOL_REF, lambda v, c: "ok", log=Quiet()))
        s.send("not json")
        bad = s.next()
        self.assertEqual(bad["call_id"], "")
        self.assertEqual(bad["error"]["code"], "HandlerProtocolError")
        wrong = request("w1", {})
        wrong["protocol"] = "v0"
        s.send(wrong)
        w = s.next()
        self.assertEqual((w["call_id"], w["error"]["code"]), ("w1", "HandlerProtocolError"))
        s.send("")  # blank lines are skipped, not answered
        s.send(request("ok1", {}))
        self.assertEqual(s.next(), {"call_id": "ok1", "ok": True, "output": "ok"})
        s.close()
        s.wait()

    def test_stop_event_stops_reading_and_reaches_calls(self):
        stop = threading.Event()
        started = threading.Event()

        def run(value, context):
            started.set()
            return "stopped" if context["stop_event"].wait(10) else "not stopped"

        s = Session(self, Tool(TOOL_REF, run, log=Quiet()), stop_event=stop)
        s.send(request("a", {}))
        self.assertTrue(started.wait(10))
        stop.set()  # stdin stays open: the stop alone must end the session
        self.assertEqual(s.next(), {"call_id": "a", "ok": True, "output": "stopped"})
        s.wait()

    def test_many_concurrent_calls_each_get_one_answer(self):
        def run(value, context):
            return create_tool_result(value["n"], create_effect_receipt(context["effect"], outcome="applied"))

        s = Session(self, Tool(TOOL_REF, run, log=Quiet()))
        n = 200
        for i in range(n):
            s.send(request(f"c{i}", {"n": i}, effect=True))
        s.close()
        seen = {}
        for _ in range(n):
            r = s.next()
            self.assertNotIn(r["call_id"], seen)
            seen[r["call_id"]] = r
            self.assertEqual(f"c{r['output']}", r["call_id"])
            self.assertEqual(r["effect_receipt"]["effect_id"], f"q1:{r['call_id']}")
        s.wait()
        self.assertEqual(len(seen), n)


if __name__ == "__main__":
    unittest.main()
