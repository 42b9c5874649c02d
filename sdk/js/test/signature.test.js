// inputSignature: declared parameters must be present, builtin type refs
// are checked, and a refused call of an external write says not_applied.

import assert from "node:assert/strict";
import test from "node:test";
import { createTool } from "../src/index.js";
import { TOOL_REF, errorReceipt, quiet, request } from "../testdata/helpers.js";

const signature = [
  { name: "request", type_ref: "type:examples.orders/CreateOrderInput" },
  { name: "count", type_ref: "type:integer" },
  { name: "note", type_ref: "type:string", optional: true },
];

const cases = [
  { name: "all present", input: { request: {}, count: 2, note: "x" }, ok: true },
  { name: "optional absent", input: { request: {}, count: 2 }, ok: true },
  { name: "undeclared extra passes", input: { request: {}, count: 2, existing: null }, ok: true },
  { name: "named type is opaque", input: { request: "anything", count: 2 }, ok: true },
  { name: "required missing", input: { count: 2 }, ok: false },
  { name: "required null", input: { request: null, count: 2 }, ok: false },
  { name: "integer is a float", input: { request: {}, count: 2.5 }, ok: false },
  { name: "integer is a string", input: { request: {}, count: "2" }, ok: false },
  { name: "optional of wrong type", input: { request: {}, count: 2, note: 3 }, ok: false },
  { name: "input not an object", input: [1], ok: false },
  { name: "input null", input: null, ok: false },
];

for (const tc of cases) {
  test(`signature: ${tc.name}`, async () => {
    let ran = false;
    const tool = createTool({
      toolRef: TOOL_REF,
      inputSignature: signature,
      log: quiet(),
      run: async () => {
        ran = true;
        return "ran";
      },
    });
    const resp = JSON.parse(await tool.handleLine(JSON.stringify(request("c1", tc.input, { effect: true }))));
    assert.equal(resp.ok, tc.ok, JSON.stringify(resp));
    assert.equal(ran, tc.ok);
    if (!tc.ok) {
      assert.equal(resp.error.code, "ToolInputInvalid");
      assert.equal(errorReceipt(resp)?.outcome, "not_applied");
    }
  });
}
