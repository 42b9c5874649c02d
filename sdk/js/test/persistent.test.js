// Persistent mode (SPEC §4.1): one request per line, calls run
// concurrently, each answer is one line carrying the request's call_id.

import assert from "node:assert/strict";
import test from "node:test";
import { createTool, createToolResult } from "../src/index.js";
import { TOOL_REF, persistentSession, quiet, request } from "../testdata/helpers.js";

// gated returns a run that waits until release(callId) is called, so a
// test decides the order in which calls finish.
function gated() {
  const gates = new Map();
  const gate = (id) => {
    if (!gates.has(id)) {
      let open;
      const p = new Promise((resolve) => (open = resolve));
      gates.set(id, { p, open });
    }
    return gates.get(id);
  };
  const run = async ({ context }) => {
    await gate(context.call_id).p;
    return createToolResult({ call: context.call_id }, {
      effectReceipt: context.createEffectReceipt?.({ outcome: "applied", receipt_ref: `r:${context.call_id}` }),
    });
  };
  return { run, release: (id) => gate(id).open() };
}

test("persistent: answers come in the order calls finish, each with its call_id", async () => {
  const { run, release } = gated();
  const s = persistentSession(createTool({ toolRef: TOOL_REF, log: quiet(), run }));
  s.send(request("a", {}, { effect: true }));
  s.send(request("b", {}, { effect: true }));
  s.send(request("c", {}));
  release("b");
  const first = await s.next();
  assert.equal(first.call_id, "b");
  assert.equal(first.effect_receipt.effect_id, "q1:b", "each call's receipt is its own");
  release("c");
  assert.equal((await s.next()).call_id, "c");
  release("a");
  const last = await s.next();
  assert.equal(last.call_id, "a");
  assert.deepEqual(last.output, { call: "a" });
  s.close();
  await s.done;
});

test("persistent: end of input waits for the calls in flight", async () => {
  const { run, release } = gated();
  const s = persistentSession(createTool({ toolRef: TOOL_REF, log: quiet(), run }));
  s.send(request("slow", {}));
  s.close();
  let finished = false;
  s.done.then(() => (finished = true));
  await new Promise((resolve) => setImmediate(resolve));
  assert.equal(finished, false, "servePersistent ended with a call in flight");
  release("slow");
  assert.equal((await s.next()).call_id, "slow");
  await s.done;
});

test("persistent: bad lines are answered, under their call_id where one is readable", async () => {
  const s = persistentSession(createTool({ toolRef: TOOL_REF, log: quiet(), run: async () => "ok" }));
  s.send("not json");
  const bad = await s.next();
  assert.equal(bad.call_id, "");
  assert.equal(bad.error.code, "HandlerProtocolError");
  const wrong = request("w1", {});
  wrong.protocol = "v0";
  s.send(wrong);
  const w = await s.next();
  assert.equal(w.call_id, "w1");
  assert.equal(w.error.code, "HandlerProtocolError");
  s.send(""); // blank lines are skipped, not answered
  s.send(request("ok1", {}));
  const ok = await s.next();
  assert.equal(ok.call_id, "ok1");
  assert.equal(ok.output, "ok");
  s.close();
  await s.done;
});

test("persistent: an abort stops reading and reaches the calls in flight", async () => {
  const controller = new AbortController();
  let started;
  const running = new Promise((resolve) => (started = resolve));
  const tool = createTool({
    toolRef: TOOL_REF,
    log: quiet(),
    run: ({ context }) =>
      new Promise((resolve) => {
        started();
        context.signal.addEventListener("abort", () => resolve("stopped"), { once: true });
      }),
  });
  const s = persistentSession(tool, { signal: controller.signal });
  s.send(request("a", {}));
  await running;
  controller.abort();
  const resp = await s.next();
  assert.equal(resp.call_id, "a");
  assert.equal(resp.output, "stopped");
  await s.done;
});

test("persistent: many concurrent calls each get one answer", async () => {
  const s = persistentSession(
    createTool({
      toolRef: TOOL_REF,
      log: quiet(),
      run: async ({ n, context }) => {
        await new Promise((resolve) => setTimeout(resolve, n % 7));
        return createToolResult(n, { effectReceipt: context.createEffectReceipt({ outcome: "applied" }) });
      },
    }),
  );
  const n = 200;
  for (let i = 0; i < n; i++) s.send(request(`c${i}`, { n: i }, { effect: true }));
  s.close();
  const seen = new Map();
  for (let i = 0; i < n; i++) {
    const r = await s.next();
    assert.equal(seen.has(r.call_id), false, `two answers for ${r.call_id}`);
    seen.set(r.call_id, r);
    assert.equal(`c${r.output}`, r.call_id);
    assert.equal(r.effect_receipt.effect_id, `q1:${r.call_id}`);
  }
  await s.done;
  assert.equal(seen.size, n);
});
