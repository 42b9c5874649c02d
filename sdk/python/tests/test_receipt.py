"""Receipts are bound to the request's effect identity and fingerprint: a
handler cannot make one for another identity, and a receipt of one call is
never sent in the answer to another."""

from __future__ import annotations

import unittest

from touba_sdk import Effect, EffectReceipt, Tool, ToubaHandlerError, create_effect_receipt, create_tool_result

from .helpers import FINGERPRINT, TOOL_REF, Quiet, answer, error_receipt, request


class ReceiptTest(unittest.TestCase):
    def test_carries_the_request_identity(self):
        tool = Tool(TOOL_REF, lambda v, c: create_tool_result({"id": 42}, create_effect_receipt(
            c["effect"], {"outcome": "applied", "receipt_ref": "order:42"})), log=Quiet())
        resp = answer(tool, request("c1", {}, effect=True))
        self.assertEqual(resp["effect_receipt"], {"effect_id": "q1:c1", "fingerprint": FINGERPRINT,
                                                  "outcome": "applied", "receipt_ref": "order:42"})

    def test_empty_receipt_ref_is_left_out(self):
        tool = Tool(TOOL_REF, lambda v, c: create_tool_result(None, create_effect_receipt(
            c["effect"], outcome="unknown", receipt_ref="")), log=Quiet())
        resp = answer(tool, request("c1", {}, effect=True))
        self.assertEqual(resp["effect_receipt"]["outcome"], "unknown")
        self.assertNotIn("receipt_ref", resp["effect_receipt"])

    def test_refuses_another_identity_fingerprint_or_outcome(self):
        refused = []

        def run(value, context):
            effect = context["effect"]
            for fields in [{"outcome": "applied", "effect_id": "q9:other"},
                           {"outcome": "applied", "fingerprint": "sha256:00"},
                           {"outcome": "done"}, {"outcome": "applied", "receipt_ref": 42}]:
                try:
                    create_effect_receipt(effect, fields)
                except (TypeError, ValueError):
                    refused.append(fields)
            # Only context["effect"] will do, not a look-alike.
            for fake in [dict(effect), {"effect_id": "q9:other", "fingerprint": "sha256:00"}]:
                try:
                    create_effect_receipt(fake, {"outcome": "applied"})
                except TypeError:
                    refused.append(fake)
            r = create_effect_receipt(effect, {"outcome": "applied"})
            try:
                r._data = {"effect_id": "q9:other"}
            except AttributeError:
                refused.append("mutation")
            return create_tool_result(None, r)

        resp = answer(Tool(TOOL_REF, run, log=Quiet()), request("c1", {}, effect=True))
        self.assertEqual(len(refused), 7, refused)
        self.assertEqual(resp["effect_receipt"]["effect_id"], "q1:c1")

    def test_effects_and_receipts_cannot_be_constructed(self):
        with self.assertRaises(TypeError):
            Effect(object(), object(), {"effect_id": "x", "fingerprint": "y"})
        with self.assertRaises(TypeError):
            EffectReceipt(object(), object(), {"effect_id": "x"})

    def test_hand_made_receipt_is_dropped(self):
        log = Quiet()
        forged = {"effect_id": "q1:c1", "fingerprint": FINGERPRINT, "outcome": "applied"}
        tool = Tool(TOOL_REF, lambda v, c: create_tool_result(None, forged), log=log)
        resp = answer(tool, request("c1", {}, effect=True))
        self.assertTrue(resp["ok"])
        self.assertNotIn("effect_receipt", resp)
        self.assertIn("not made by create_effect_receipt", log.text())

    def test_receipt_of_another_call_is_dropped(self):
        log = Quiet()
        first = []

        def run(value, context):
            if not first:
                first.append(create_effect_receipt(context["effect"], outcome="applied", receipt_ref="order:1"))
            return create_tool_result(None, first[0])

        tool = Tool(TOOL_REF, run, log=log)
        self.assertEqual(answer(tool, request("a", {}, effect=True))["effect_receipt"]["effect_id"], "q1:a")
        b = answer(tool, request("b", {}, effect=True))
        self.assertNotIn("effect_receipt", b, "call b answered with call a's receipt")
        self.assertIn("another call", log.text())

    def test_effect_of_another_call_makes_no_receipt_for_this_one(self):
        effects = []

        def run(value, context):
            effects.append(context["effect"])
            return create_tool_result(None, create_effect_receipt(effects[0], outcome="applied"))

        tool = Tool(TOOL_REF, run, log=Quiet())
        answer(tool, request("a", {}, effect=True))
        self.assertNotIn("effect_receipt", answer(tool, request("b", {}, effect=True)))

    def test_error_receipt_must_be_the_calls_own(self):
        first = []

        def run(value, context):
            if not first:
                first.append(create_effect_receipt(context["effect"], outcome="not_applied"))
            raise ToubaHandlerError("ExternalWriteRefused", "refused", {"effect_receipt": first[0]})

        tool = Tool(TOOL_REF, run, log=Quiet())
        self.assertEqual(error_receipt(answer(tool, request("a", {}, effect=True)))["effect_id"], "q1:a")
        b = answer(tool, request("b", {}, effect=True))
        self.assertEqual(b["error"]["code"], "ExternalWriteRefused", "the business code is kept without a receipt")
        self.assertIsNone(error_receipt(b))


if __name__ == "__main__":
    unittest.main()
