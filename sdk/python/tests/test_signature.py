"""input_signature: declared parameters must be present, builtin type refs
are checked, and a refused call of an external write says not_applied."""

from __future__ import annotations

import unittest

from touba_sdk import Tool

from .helpers import TOOL_REF, Quiet, answer, error_receipt, request

SIGNATURE = [
    {"name": "request", "type_ref": "type:examples.orders/CreateOrderInput"},
    {"name": "count", "type_ref": "type:integer"},
    {"name": "note", "type_ref": "type:string", "optional": True},
]

CASES = [
    ("all present", {"request": {}, "count": 2, "note": "x"}, True),
    ("optional absent", {"request": {}, "count": 2}, True),
    ("undeclared extra passes", {"request": {}, "count": 2, "existing": None}, True),
    ("named type is opaque", {"request": "anything", "count": 2}, True),
    ("required missing", {"count": 2}, False),
    ("required null", {"request": None, "count": 2}, False),
    ("integer is a float", {"request": {}, "count": 2.5}, False),
    ("integer is a boolean", {"request": {}, "count": True}, False),
    ("integer is a string", {"request": {}, "count": "2"}, False),
    ("optional of wrong type", {"request": {}, "count": 2, "note": 3}, False),
    ("input not an object", [1], False),
    ("input null", None, False),
]


class SignatureTest(unittest.TestCase):
    def test_cases(self):
        for name, value, ok in CASES:
            with self.subTest(name):
                ran = []
                tool = Tool(TOOL_REF, lambda v, c: ran.append(True) or "ran", input_signature=SIGNATURE, log=Quiet())
                resp = answer(tool, request("c1", value, effect=True))
                self.assertEqual(resp["ok"], ok, resp)
                self.assertEqual(bool(ran), ok)
                if not ok:
                    self.assertEqual(resp["error"]["code"], "ToolInputInvalid")
                    self.assertEqual(error_receipt(resp)["outcome"], "not_applied")


if __name__ == "__main__":
    unittest.main()
