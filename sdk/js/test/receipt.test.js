// Receipts are bound to the request's effect identity and fingerprint: a
// handler cannot make one for another identity, and a receipt of one call
// is never sent in the answer to another.

import assert from "node:assert/strict";
import test from "node:test";
import { ToubaHandlerError, createTool, createToolResult } from "../src/index.js";
import { FINGERPRINT, TOOL_REF, errorReceipt, quiet, request } from "../testdata/helpers.js";

const call = async (tool, req) => JSON.parse(await tool.handleLine(JSON.stringify(req)));

test("receipt: carries the request's effect_id and fingerprint", async () => {
  const tool = createTool({
    toolRef: TOOL_REF,
    log: quiet(),
    run: async ({ context }) =>
      createToolResult({ id: 42 }, { effectReceipt: context.createEffectReceipt({ outcome: "applied", receipt_ref: "order:42" }) }),
  });
  const resp = await call(tool, request("c1", {}, { effect: true }));
  assert.deepEqual(resp.effect_receipt, {
    effect_id: "q1:c1",
    fingerprint: FINGERPRINT,
    outcome: "applied",
    receipt_ref: "order:42",
  });
});

test("receipt: an empty receipt_ref is left out", async () => {
  const tool = createTool({
    toolRef: TOOL_REF,
    log: quiet(),
    run: async ({ context }) =>
      createToolResult(null, { effectReceipt: context.createEffectReceipt({ outcome: "unknown", receipt_ref: "" }) }),
  });
  const resp = await call(tool, request("c1", {}, { effect: true }));
  assert.equal("receipt_ref" in resp.effect_receipt, false);
  assert.equal(resp.effect_receipt.outcome, "unknown");
});

test("receipt: createEffectReceipt refuses another identity, fingerprint or outcome", async () => {
  const refused = [];
  const tool = createTool({
    toolRef: TOOL_REF,
    log: quiet(),
    run: async ({ context }) => {
      for (const opts of [
        { outcome: "applied", effect_id: "q9:other" },
        { outcome: "applied", fingerprint: "sha256:00" },
        { outcome: "done" },
        { outcome: "applied", receipt_ref: 42 },
        null,
      ]) {
        try {
          context.createEffectReceipt(opts);
        } catch (err) {
          refused.push(err instanceof TypeError);
        }
      }
      const r = context.createEffectReceipt({ outcome: "applied" });
      assert.throws(() => {
        "use strict";
        r.effect_id = "q9:other";
      }, TypeError);
      return createToolResult(null, { effectReceipt: r });
    },
  });
  const resp = await call(tool, request("c1", {}, { effect: true }));
  assert.deepEqual(refused, [true, true, true, true, true]);
  assert.equal(resp.effect_receipt.effect_id, "q1:c1");
});

test("receipt: a hand-made receipt is dropped", async () => {
  const log = quiet();
  const tool = createTool({
    toolRef: TOOL_REF,
    log,
    run: async () =>
      createToolResult(null, { effectReceipt: { effect_id: "q1:c1", fingerprint: FINGERPRINT, outcome: "applied" } }),
  });
  const resp = await call(tool, request("c1", {}, { effect: true }));
  assert.equal(resp.ok, true);
  assert.equal(resp.effect_receipt, undefined);
  assert.match(log.lines.join("\n"), /not made by context.createEffectReceipt/);
});

test("receipt: a receipt of another call is dropped", async () => {
  const log = quiet();
  let first = null;
  const tool = createTool({
    toolRef: TOOL_REF,
    log,
    run: async ({ context }) => {
      first ??= context.createEffectReceipt({ outcome: "applied", receipt_ref: "order:1" });
      return createToolResult(null, { effectReceipt: first });
    },
  });
  const a = await call(tool, request("a", {}, { effect: true }));
  assert.equal(a.effect_receipt.effect_id, "q1:a");
  const b = await call(tool, request("b", {}, { effect: true }));
  assert.equal(b.effect_receipt, undefined, "call b answered with call a's receipt");
  assert.match(log.lines.join("\n"), /another call/);
});

test("receipt: an error's receipt must be the call's own too", async () => {
  let first = null;
  const tool = createTool({
    toolRef: TOOL_REF,
    log: quiet(),
    run: async ({ context }) => {
      first ??= context.createEffectReceipt({ outcome: "not_applied" });
      throw new ToubaHandlerError("ExternalWriteRefused", "refused", { effect_receipt: first });
    },
  });
  assert.equal(errorReceipt(await call(tool, request("a", {}, { effect: true }))).effect_id, "q1:a");
  const b = await call(tool, request("b", {}, { effect: true }));
  assert.equal(b.error.code, "ExternalWriteRefused", "the business code is kept without a receipt");
  assert.equal(errorReceipt(b), null);
});
