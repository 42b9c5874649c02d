// The checks the SDK makes before run, and the ways a run can end, each
// answered with exactly one response (SPEC §4).

import assert from "node:assert/strict";
import test from "node:test";
import { ToubaHandlerError, createTool, createToolResult } from "../src/index.js";
import { TOOL_REF, errorReceipt, quiet, request } from "../testdata/helpers.js";

const echo = async ({ context, ...params }) =>
  createToolResult(params, { effectReceipt: context.createEffectReceipt?.({ outcome: "applied", receipt_ref: "echo:1" }) });

const edit = (doc, fn) => {
  fn(doc);
  return JSON.stringify(doc);
};

const cases = [
  { name: "ok", text: JSON.stringify(request("c1", { a: 1 })), want: "", ran: true },
  { name: "ok external write", text: JSON.stringify(request("c1", { a: 1 }, { effect: true })), want: "", ran: true, receipt: "applied" },
  { name: "not json", text: "hello", want: "HandlerProtocolError" },
  { name: "array", text: "[1,2]", want: "HandlerProtocolError" },
  { name: "wrong protocol", text: edit(request("c1", {}), (d) => (d.protocol = "touba-tool-handler-v2")), want: "HandlerProtocolError" },
  { name: "no protocol", text: edit(request("c1", {}), (d) => delete d.protocol), want: "HandlerProtocolError" },
  { name: "unknown operation", text: edit(request("c1", {}), (d) => (d.operation = "delete")), want: "HandlerProtocolError" },
  { name: "attempt not a number", text: edit(request("c1", {}), (d) => (d.context.attempt = "one")), want: "HandlerProtocolError" },
  { name: "grants not strings", text: edit(request("c1", {}), (d) => (d.context.grants = [1])), want: "HandlerProtocolError" },
  { name: "context not an object", text: edit(request("c1", {}), (d) => (d.context = "x")), want: "HandlerProtocolError" },
  {
    name: "effect without fingerprint",
    text: edit(request("c1", {}, { effect: true }), (d) => delete d.context.effect.fingerprint),
    want: "HandlerProtocolError",
  },
  {
    name: "tool ref mismatch",
    text: edit(request("c1", {}, { effect: true }), (d) => (d.tool_ref = "tool:other/Thing")),
    want: "ToolRefMismatch",
    receipt: "not_applied",
  },
  { name: "grant missing", text: JSON.stringify(request("c1", {}, { effect: true, grants: ["files"] })), want: "GrantMissing", receipt: "not_applied" },
  { name: "grants absent", text: edit(request("c1", {}), (d) => delete d.context.grants), want: "GrantMissing" },
  {
    name: "business error",
    text: JSON.stringify(request("c1", {}, { effect: true })),
    run: async ({ context }) => {
      throw new ToubaHandlerError("ExternalWriteRefused", "The database refused the transaction.", {
        effect_receipt: context.createEffectReceipt({ outcome: "not_applied" }),
      });
    },
    want: "ExternalWriteRefused",
    ran: true,
    receipt: "not_applied",
  },
  {
    name: "business error without receipt",
    text: JSON.stringify(request("c1", {}, { effect: true })),
    run: async () => {
      throw new ToubaHandlerError("OutOfStock", "none left");
    },
    want: "OutOfStock",
    ran: true,
  },
  {
    name: "error without code",
    text: JSON.stringify(request("c1", {})),
    run: async () => {
      throw new ToubaHandlerError("", "x");
    },
    want: "HandlerFailed",
    ran: true,
  },
  {
    name: "plain error keeps its text private",
    text: JSON.stringify(request("c1", {})),
    run: async () => {
      throw new Error("dial db password=hunter2");
    },
    want: "HandlerFailed",
    ran: true,
  },
  {
    name: "thrown string",
    text: JSON.stringify(request("c1", {})),
    run: () => {
      throw "boom";
    },
    want: "HandlerFailed",
    ran: true,
  },
  {
    name: "output not encodable keeps the receipt",
    text: JSON.stringify(request("c1", {}, { effect: true })),
    run: async ({ context }) =>
      createToolResult({ n: 1n }, { effectReceipt: context.createEffectReceipt({ outcome: "applied", receipt_ref: "x:1" }) }),
    want: "HandlerFailed",
    ran: true,
    receipt: "applied",
  },
];

for (const tc of cases) {
  test(`checks: ${tc.name}`, async () => {
    let ran = false;
    const run = tc.run ?? echo;
    const log = quiet();
    const tool = createTool({
      toolRef: TOOL_REF,
      requiredGrants: ["network"],
      log,
      run: (args) => {
        ran = true;
        return run(args);
      },
    });
    const line = await tool.handleLine(tc.text);
    assert.ok(line.endsWith("\n") && !line.slice(0, -1).includes("\n"), `one line: ${JSON.stringify(line)}`);
    const resp = JSON.parse(line);
    assert.equal(resp.ok, tc.want === "", JSON.stringify(resp));
    assert.equal(resp.error?.code ?? "", tc.want, JSON.stringify(resp));
    assert.equal(ran, Boolean(tc.ran), "run called");
    assert.equal("call_id" in resp, false, "one-shot answers carry no call_id");
    const receipt = resp.ok ? resp.effect_receipt : errorReceipt(resp);
    assert.equal(receipt?.outcome ?? "", tc.receipt ?? "", JSON.stringify(resp));
    if (!resp.ok) assert.equal(resp.effect_receipt, undefined, "error answers carry the receipt in details");
    assert.ok(!line.includes("hunter2"), "internal error text leaked");
  });
}

test("checks: a GrantMissing answer names the missing grants", async () => {
  const tool = createTool({ toolRef: TOOL_REF, requiredGrants: ["network", "files"], log: quiet(), run: echo });
  const resp = JSON.parse(await tool.handleLine(JSON.stringify(request("c1", {}, { grants: ["network"] }))));
  assert.deepEqual(resp.error.details.missing, ["files"]);
});

test("checks: business error details pass through, a forged effect_receipt does not", async () => {
  const log = quiet();
  const tool = createTool({
    toolRef: TOOL_REF,
    log,
    run: async () => {
      throw new ToubaHandlerError("OutOfStock", "none left", {
        sku: "W-1",
        effect_receipt: { effect_id: "q1:c1", fingerprint: "sha256:00", outcome: "not_applied" },
      });
    },
  });
  const resp = JSON.parse(await tool.handleLine(JSON.stringify(request("c1", {}, { effect: true }))));
  assert.equal(resp.error.details.sku, "W-1");
  assert.equal(errorReceipt(resp), null);
  assert.match(log.lines.join("\n"), /receipt dropped/);
});

test("checks: the context run sees", async () => {
  let seen;
  const tool = createTool({
    toolRef: TOOL_REF,
    log: quiet(),
    run: async (args) => {
      seen = args;
      return null;
    },
  });
  const req = request("c7", { request: { item: "widget" }, existing: null }, { effect: true });
  req.operation = "compensate";
  req.context.deadline_unix_ms = Date.now() + 60_000;
  req.context.traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
  const resp = JSON.parse(await tool.handleLine(JSON.stringify(req)));
  assert.equal(resp.ok, true);
  assert.equal(resp.output, null);
  assert.deepEqual(seen.request, { item: "widget" });
  const c = seen.context;
  assert.equal(c.call_id, "c7");
  assert.equal(c.traceparent, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
  assert.equal(c.operation, "compensate");
  assert.equal(c.tool_ref, TOOL_REF);
  assert.equal(c.effect.effect_id, "q1:c7");
  assert.ok(Object.isFrozen(c) && Object.isFrozen(c.effect), "context and effect are read-only");
  assert.ok(c.deadline instanceof Date);
  assert.equal(c.signal.aborted, false);
  assert.deepEqual(c.input, req.input);
});

test("checks: a call without an effect has no createEffectReceipt", async () => {
  let ctx;
  const tool = createTool({ toolRef: TOOL_REF, log: quiet(), run: async ({ context }) => void (ctx = context) });
  await tool.handleLine(JSON.stringify(request("c1", {})));
  assert.equal(ctx.effect, null);
  assert.equal(ctx.createEffectReceipt, undefined);
});

test("checks: the deadline aborts context.signal", async () => {
  const tool = createTool({
    toolRef: TOOL_REF,
    log: quiet(),
    run: ({ context }) =>
      new Promise((resolve) => {
        context.signal.addEventListener("abort", () => resolve({ aborted: true }), { once: true });
      }),
  });
  const req = request("c1", {});
  req.context.deadline_unix_ms = Date.now() + 50;
  const resp = JSON.parse(await tool.handleLine(JSON.stringify(req)));
  assert.deepEqual(resp.output, { aborted: true });
});

test("checks: invalid definitions are refused", () => {
  const run = async () => null;
  for (const def of [
    {},
    { toolRef: "", run },
    { toolRef: TOOL_REF },
    { toolRef: TOOL_REF, run, requiredGrant: ["network"] },
    { toolRef: TOOL_REF, run, requiredGrants: "network" },
    { toolRef: TOOL_REF, run, inputSignature: [{ name: "context" }] },
    { toolRef: TOOL_REF, run, inputSignature: [{ name: "a" }, { name: "a" }] },
    { toolRef: TOOL_REF, run, inputSignature: [{ type_ref: "type:string" }] },
  ]) {
    assert.throws(() => createTool(def), TypeError, JSON.stringify(def));
  }
});
