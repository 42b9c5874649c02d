"""Workers that connect out (SPEC §4.3): connect against the real daemon,
built from this repository (daemon.py), with a worker binding."""

from __future__ import annotations

import shutil
import threading
import time
import unittest
from typing import Any, Callable

from touba_sdk import Tool, Worker, WorkerRefusedError, connect, create_effect_receipt, create_tool_result

from .daemon import POST_TOOL, TOKEN, World, build, wait_for

_built: dict[str, str] = {}


def setUpModule() -> None:  # noqa: N802 - unittest's name
    _built["binary"], _built["folder"] = build()


def tearDownModule() -> None:  # noqa: N802 - unittest's name
    shutil.rmtree(_built.get("folder", ""), ignore_errors=True)


class Recorder:
    """The remote side of tool:wk/Post: counts each effect id it applies and
    the event ids in the order run. gate, when given, is called with the
    call's context before the write."""

    def __init__(self, gate: Callable[[Any], None] | None = None) -> None:
        self.lock = threading.Lock()
        self.applied: dict[str, int] = {}
        self.events: list[str] = []
        self.running = 0
        self.max_running = 0
        self.gate = gate
        self.tool = Tool(POST_TOOL, self.run, log=lambda msg: None)

    def run(self, value: Any, context: Any) -> Any:
        with self.lock:
            self.running += 1
            self.max_running = max(self.max_running, self.running)
        try:
            if self.gate:
                self.gate(context)
            effect_id = context["effect"]["effect_id"]
            with self.lock:
                self.applied[effect_id] = self.applied.get(effect_id, 0) + 1
                self.events.append(value["order"]["order_id"])
            return create_tool_result({"posted": effect_id}, create_effect_receipt(
                context["effect"], {"outcome": "applied", "receipt_ref": f"r:{effect_id}"}))
        finally:
            with self.lock:
                self.running -= 1


def ids(prefix: str, n: int) -> list[str]:
    return [f"{prefix}-{i:02d}" for i in range(n)]


class ConnectTest(unittest.TestCase):
    def world(self) -> World:
        w = World(_built["binary"])
        self.addCleanup(w.close)
        w.start()
        return w

    def worker(self, w: World, tool: Tool, max_in_flight: int) -> tuple[Worker, list[str]]:
        """A Worker running in its own thread until the test ends."""
        logs: list[str] = []
        wk = Worker(w.url, TOKEN, [tool], max_in_flight=max_in_flight, take_wait=5, log=logs.append).start()

        def cleanup() -> None:
            wk.stop()
            wk.join(30)

        self.addCleanup(cleanup)
        return wk, logs

    def assert_applied_once(self, w: World, r: Recorder, n: int) -> None:
        effects = w.effects()
        self.assertEqual(len(effects), n, "one effect per delivery")
        for e in effects:
            self.assertEqual(e["state"], "applied", e["effect_id"])
            self.assertEqual(r.applied.get(e["effect_id"]), 1, f"effect {e['effect_id']} applied {r.applied.get(e['effect_id'])} times")
        self.assertEqual(len(r.applied), n)

    def test_calls_answered_and_applied_once(self) -> None:
        w = self.world()
        r = Recorder()
        stop = threading.Event()
        errors: list[BaseException] = []

        def run() -> None:
            try:
                connect(w.url, TOKEN, [r.tool], max_in_flight=4, take_wait=5, stop_event=stop, log=lambda m: None)
            except BaseException as err:  # noqa: BLE001 - reported below
                errors.append(err)

        t = threading.Thread(target=run)
        t.start()
        self.addCleanup(lambda: (stop.set(), t.join(30)))
        w.send(*ids("a", 20))
        w.wait_done(20)
        self.assert_applied_once(w, r, 20)
        stop.set()
        t.join(30)
        self.assertFalse(t.is_alive(), "connect did not return once stop_event was set")
        self.assertEqual(errors, [])

    def test_max_in_flight_bounds_calls_in_hand(self) -> None:
        w = self.world()
        total = 12
        started = [0]

        # Each call waits until three are in hand (or all have started), then
        # a little longer: the window in which a worker ignoring max_in_flight
        # would take a fourth. The bound is asserted on what was seen, never timed.
        def gate(context: Any) -> None:
            with r.lock:
                started[0] += 1
            wait_for(lambda: r.running >= 3 or started[0] == total, 20, "three calls in hand")
            time.sleep(0.1)  # the window above

        r = Recorder(gate)
        self.worker(w, r.tool, 3)
        w.send(*ids("m", total))
        w.wait_done(total)
        self.assertEqual(r.max_running, 3, "at most max_in_flight calls in hand, and that many used")
        self.assert_applied_once(w, r, total)

    def test_stop_finishes_the_call_in_hand(self) -> None:
        w = self.world()
        in_hand = threading.Event()
        release = threading.Event()

        def gate(context: Any) -> None:
            in_hand.set()
            release.wait(30)

        r = Recorder(gate)
        logs: list[str] = []
        with Worker(w.url, TOKEN, [r.tool], max_in_flight=1, take_wait=5, log=logs.append) as wk:
            w.send("s-1")
            self.assertTrue(in_hand.wait(20), "the call was never in hand")
            wk.stop()
            # A negative check: the worker must not return while the call is in
            # hand (it would within a few ms of the stop if it did not wait).
            with self.assertRaises(TimeoutError):
                wk.join(0.2)
            w.send("s-2")
            release.set()
        # The answer was sent before the worker returned: the effect is applied.
        self.assertEqual([e["state"] for e in w.effects()], ["applied"])
        w.wait_done(1)
        # s-2 was not taken: it waits for a worker, no effect begun.
        self.assertEqual([e["event_id"] for e in w.entries("pending")], ["s-2"])
        self.assertEqual(r.events, ["s-1"])

    def test_stop_cuts_a_waiting_take_short(self) -> None:
        w = self.world()
        r = Recorder()
        wk = Worker(w.url, TOKEN, [r.tool], take_wait=50, log=lambda m: None).start()
        wait_for(lambda: wk._take_conn is not None and wk._take_conn.sock is not None, 20, "a take to be open")
        start = time.monotonic()
        wk.stop()
        wk.join(10)
        self.assertLess(time.monotonic() - start, 10, "stop waited for the long poll to end")

    def test_reconnects_after_a_restart_and_drains_in_order(self) -> None:
        w = self.world()
        r = Recorder()
        wk, logs = self.worker(w, r.tool, 1)
        w.send(*ids("before", 3))
        w.wait_done(3)
        w.stop()
        wait_for(lambda: any("cannot reach" in line for line in logs), 20, "the worker to say it lost the daemon")
        self.assertTrue(wk._thread.is_alive(), "the worker stopped when the daemon went away")
        w.start()
        w.send(*ids("after", 6))
        w.wait_done(9, 45)
        self.assertEqual(r.events, w.accepted, "calls run in acceptance order")
        wait_for(lambda: any("connected to" in line and "again" in line for line in logs), 10,
                 "the worker to say it is back")
        self.assert_applied_once(w, r, 9)

    def test_refused_token_or_tool_is_fatal(self) -> None:
        w = self.world()
        r = Recorder()
        with self.assertRaises(WorkerRefusedError) as cm:
            connect(w.url, "not-the-token", [r.tool], log=lambda m: None)
        self.assertEqual((cm.exception.status, cm.exception.code), (401, "WorkerUnauthorized"))
        other = Tool("tool:wk/Nope", lambda value, context: None)
        with self.assertRaises(WorkerRefusedError) as cm:
            connect(w.url, TOKEN, [other], log=lambda m: None)
        self.assertEqual((cm.exception.status, cm.exception.code), (403, "WorkerForbidden"))


if __name__ == "__main__":
    unittest.main()
