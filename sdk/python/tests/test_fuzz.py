"""A seeded random search over mangled requests: whatever arrives, the SDK
answers exactly one JSON line with a boolean ok, never raises, and never
sends a receipt that is not the request's."""

from __future__ import annotations

import json
import random
import unittest

from touba_sdk import Tool, create_effect_receipt, create_tool_result

from .helpers import TOOL_REF, Quiet, request

ODD_VALUES = [None, True, 0, -1, 1.5, "", "x", "\u2028", [], [1], {}, {"a": 1}, TOOL_REF, 2 ** 60]


def mangle(rng: random.Random, doc):
    paths = []

    def walk(v, path):
        paths.append(path)
        if isinstance(v, dict):
            for k in v:
                walk(v[k], path + [k])
        elif isinstance(v, list):
            for i, item in enumerate(v):
                walk(item, path + [i])

    walk(doc, [])
    path = rng.choice(paths)
    if not path:
        return rng.choice(ODD_VALUES)
    parent = doc
    for k in path[:-1]:
        parent = parent[k]
    if rng.random() < 0.3:
        del parent[path[-1]]
    else:
        parent[path[-1]] = rng.choice(ODD_VALUES)
    return doc


def run(value, context):
    receipt = create_effect_receipt(context["effect"], outcome="applied") if context["effect"] else None
    return create_tool_result("ok", receipt)


class FuzzTest(unittest.TestCase):
    def test_mangled_requests(self):
        tool = Tool(TOOL_REF, run, required_grants=["network"], log=Quiet())
        rng = random.Random(7)
        for i in range(3000):
            doc = request(f"c{i}", {"a": [1, {"b": "c"}]}, effect=True)
            for _ in range(rng.randint(1, 3)):
                doc = mangle(rng, doc)
            text = json.dumps(doc)
            if rng.random() < 0.1:
                text = text[: rng.randrange(len(text) + 1)]
            persistent = rng.random() < 0.5
            line = tool.handle_line(text, persistent=persistent)
            self.assertTrue(line.endswith(b"\n") and line.count(b"\n") == 1, f"case {i}: {line!r}")
            resp = json.loads(line)
            self.assertIsInstance(resp["ok"], bool, f"case {i}")
            if persistent:
                self.assertIsInstance(resp["call_id"], str, f"case {i}")
            if not resp["ok"]:
                self.assertIsInstance(resp["error"]["code"], str, f"case {i}")
            receipt = resp.get("effect_receipt") or ((resp.get("error") or {}).get("details") or {}).get("effect_receipt")
            if receipt:
                effect = doc["context"]["effect"]
                self.assertEqual(receipt["effect_id"], effect["effect_id"], f"case {i}")
                self.assertEqual(receipt["fingerprint"], effect["fingerprint"], f"case {i}")


if __name__ == "__main__":
    unittest.main()
