"""The checks the SDK makes before run, and the ways a run can end, each
answered with exactly one response (SPEC §4)."""

from __future__ import annotations

import copy
import time
import unittest

from touba_sdk import Tool, ToubaHandlerError, create_effect_receipt, create_tool_result

from .helpers import TOOL_REF, Quiet, answer, error_receipt, request


def echo(value, context):
    receipt = None
    if context["effect"] is not None:
        receipt = create_effect_receipt(context["effect"], {"outcome": "applied", "receipt_ref": "echo:1"})
    return create_tool_result(value, receipt)


def edited(doc, fn):
    doc = copy.deepcopy(doc)
    fn(doc)
    return doc


def raises(err):
    def run(value, context):
        raise err
    return run


def refused_with_receipt(value, context):
    raise ToubaHandlerError("ExternalWriteRefused", "The database refused the transaction.", {
        "effect_receipt": create_effect_receipt(context["effect"], {"outcome": "not_applied"})})


def unencodable(value, context):
    return create_tool_result({"n": float("nan")},
                              create_effect_receipt(context["effect"], outcome="applied", receipt_ref="x:1"))


async def async_echo(value, context):
    return echo(value, context)


CASES = [
    # name, request, run, want code ("" for ok), run called, receipt outcome
    ("ok", request("c1", {"a": 1}), echo, "", True, ""),
    ("ok external write", request("c1", {"a": 1}, effect=True), echo, "", True, "applied"),
    ("async run", request("c1", {"a": 1}, effect=True), async_echo, "", True, "applied"),
    ("not json", "hello", echo, "HandlerProtocolError", False, ""),
    ("not utf-8", b"\xff\xfe{}", echo, "HandlerProtocolError", False, ""),
    ("NaN is not JSON", '{"protocol": NaN}', echo, "HandlerProtocolError", False, ""),
    ("array", "[1,2]", echo, "HandlerProtocolError", False, ""),
    ("wrong protocol", edited(request("c1", {}), lambda d: d.update(protocol="touba-tool-handler-v2")), echo,
     "HandlerProtocolError", False, ""),
    ("no protocol", edited(request("c1", {}), lambda d: d.pop("protocol")), echo, "HandlerProtocolError", False, ""),
    ("unknown operation", edited(request("c1", {}), lambda d: d.update(operation="delete")), echo,
     "HandlerProtocolError", False, ""),
    ("attempt not an integer", edited(request("c1", {}), lambda d: d["context"].update(attempt="one")), echo,
     "HandlerProtocolError", False, ""),
    ("attempt a boolean", edited(request("c1", {}), lambda d: d["context"].update(attempt=True)), echo,
     "HandlerProtocolError", False, ""),
    ("grants not strings", edited(request("c1", {}), lambda d: d["context"].update(grants=[1])), echo,
     "HandlerProtocolError", False, ""),
    ("context not an object", edited(request("c1", {}), lambda d: d.update(context="x")), echo,
     "HandlerProtocolError", False, ""),
    ("effect without fingerprint",
     edited(request("c1", {}, effect=True), lambda d: d["context"]["effect"].pop("fingerprint")), echo,
     "HandlerProtocolError", False, ""),
    ("tool ref mismatch", edited(request("c1", {}, effect=True), lambda d: d.update(tool_ref="tool:other/Thing")),
     echo, "ToolRefMismatch", False, "not_applied"),
    ("grant missing", request("c1", {}, effect=True, grants=["files"]), echo, "GrantMissing", False, "not_applied"),
    ("grants absent", edited(request("c1", {}), lambda d: d["context"].pop("grants")), echo, "GrantMissing", False, ""),
    ("business error", request("c1", {}, effect=True), refused_with_receipt, "ExternalWriteRefused", True,
     "not_applied"),
    ("business error without receipt", request("c1", {}, effect=True), raises(ToubaHandlerError("OutOfStock", "none")),
     "OutOfStock", True, ""),
    ("error without code", request("c1", {}), raises(ToubaHandlerError("", "x")), "HandlerFailed", True, ""),
    ("plain error keeps its text private", request("c1", {}), raises(RuntimeError("dial db password=hunter2")),
     "HandlerFailed", True, ""),
    ("SystemExit in run", request("c1", {}), raises(SystemExit(3)), "HandlerFailed", True, ""),
    ("output not encodable keeps the receipt", request("c1", {}, effect=True), unencodable, "HandlerFailed", True,
     "applied"),
    ("output a set", request("c1", {}), lambda v, c: {1, 2}, "HandlerFailed", True, ""),
    ("output a lone surrogate", request("c1", {}), lambda v, c: "\ud800", "HandlerFailed", True, ""),
]


class ChecksTest(unittest.TestCase):
    def test_cases(self):
        for name, doc, run, want, want_ran, want_receipt in CASES:
            with self.subTest(name):
                ran = []

                def wrapped(value, context, run=run):
                    ran.append(True)
                    return run(value, context)

                tool = Tool(TOOL_REF, wrapped, required_grants=["network"], log=Quiet())
                resp = answer(tool, doc)
                self.assertEqual(resp["ok"], want == "", resp)
                self.assertEqual((resp.get("error") or {}).get("code", ""), want, resp)
                self.assertEqual(bool(ran), want_ran)
                self.assertNotIn("call_id", resp)
                receipt = resp.get("effect_receipt") if resp["ok"] else error_receipt(resp)
                self.assertEqual((receipt or {}).get("outcome", ""), want_receipt, resp)
                if not resp["ok"]:
                    self.assertNotIn("effect_receipt", resp)
                self.assertNotIn("hunter2", str(resp))

    def test_grant_missing_names_the_grants(self):
        tool = Tool(TOOL_REF, echo, required_grants=["network", "files"], log=Quiet())
        resp = answer(tool, request("c1", {}, grants=["network"]))
        self.assertEqual(resp["error"]["details"]["missing"], ["files"])

    def test_details_pass_a_forged_receipt_does_not(self):
        log = Quiet()
        forged = {"effect_id": "q1:c1", "fingerprint": "sha256:00", "outcome": "not_applied"}
        tool = Tool(TOOL_REF, raises(ToubaHandlerError("OutOfStock", "none", {"sku": "W-1", "effect_receipt": forged})),
                    log=log)
        resp = answer(tool, request("c1", {}, effect=True))
        self.assertEqual(resp["error"]["details"]["sku"], "W-1")
        self.assertIsNone(error_receipt(resp))
        self.assertIn("receipt dropped", log.text())

    def test_the_context_run_sees(self):
        seen = {}

        def run(value, context):
            seen.update(value=value, context=context)

        req = request("c7", {"request": {"item": "widget"}}, effect=True)
        req["operation"] = "compensate"
        req["context"]["deadline_unix_ms"] = int(time.time() * 1000) + 60_000
        req["context"]["traceparent"] = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        resp = answer(Tool(TOOL_REF, run, log=Quiet()), req)
        self.assertEqual(resp, {"ok": True, "output": None})
        c = seen["context"]
        self.assertEqual(seen["value"], {"request": {"item": "widget"}})
        self.assertEqual(c["call_id"], "c7")
        self.assertEqual(c["traceparent"], "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
        self.assertEqual(c["operation"], "compensate")
        self.assertEqual(c["tool_ref"], TOOL_REF)
        self.assertEqual(c["effect"]["effect_id"], "q1:c7")
        self.assertGreater(c["deadline"], time.time())
        self.assertFalse(c["stop_event"].is_set())
        with self.assertRaises(TypeError):
            c["call_id"] = "other"
        with self.assertRaises(TypeError):
            c["effect"]["effect_id"] = "q9:other"

    def test_no_effect_without_external_write(self):
        seen = {}
        answer(Tool(TOOL_REF, lambda v, c: seen.update(effect=c["effect"]), log=Quiet()), request("c1", {}))
        self.assertIsNone(seen["effect"])

    def test_invalid_definitions(self):
        def run(value, context):
            return None

        for kwargs in [
            {"tool_ref": "", "run": run},
            {"tool_ref": TOOL_REF, "run": None},
            {"tool_ref": TOOL_REF, "run": run, "required_grants": [""]},
            {"tool_ref": TOOL_REF, "run": run, "input_signature": [{"name": "a"}, {"name": "a"}]},
            {"tool_ref": TOOL_REF, "run": run, "input_signature": [{"type_ref": "type:string"}]},
            {"tool_ref": TOOL_REF, "run": run, "input_signature": "request"},
        ]:
            with self.subTest(kwargs=kwargs), self.assertRaises(TypeError):
                Tool(kwargs.pop("tool_ref"), kwargs.pop("run"), **kwargs)


if __name__ == "__main__":
    unittest.main()


class DeepNesting(unittest.TestCase):
    """A request nested past the parser's recursion limit is answered, not a crash."""

    def test_answered_as_protocol_error(self):
        tool = Tool(TOOL_REF, echo, log=Quiet())
        text = '{"x": ' + "[" * 5000 + "]" * 5000 + "}"
        line = tool.handle_line(text)
        self.assertTrue(line.endswith(b"\n"))
        import json
        resp = json.loads(line)
        self.assertFalse(resp["ok"])
        self.assertEqual(resp["error"]["code"], "HandlerProtocolError")
