// Workers that connect out (SPEC §4.3): connect against the real daemon,
// built from this repository (testdata/daemon.js), with a worker binding.

import assert from "node:assert/strict";
import { rm } from "node:fs/promises";
import { createServer } from "node:http";
import test from "node:test";
import { ToubaNoAnswer, ToubaWorkerRefusedError, connect, createTool, createToolResult } from "../src/index.js";
import { POST_TOOL, TOKEN, World, binary, waitFor } from "../testdata/daemon.js";
import { TOOL_REF, request } from "../testdata/helpers.js";

// Built once for the file; only a missing go skips (a failed build fails
// each test that needs the daemon).
const built = await binary().catch((err) => ({ error: err }));
const skip = built.skip ?? false;
test.after(() => built.dir && rm(built.dir, { recursive: true, force: true }));

// world starts a daemon for one test and removes it after.
async function world(t) {
  if (built.error) throw new Error(`go build ./cmd/touba-trigger: ${built.error.message}\n${built.error.stderr ?? ""}`);
  const w = await World.create(built.bin);
  t.after(() => w.close());
  await w.start();
  return w;
}

// recorder is the remote side of tool:wk/Post: it counts each effect id
// it applies and the event ids in the order run. gate, when given, is
// awaited before the write, with the call's context.
function recorder(gate) {
  const r = { applied: new Map(), events: [], running: 0, maxRunning: 0 };
  r.tool = createTool({
    toolRef: POST_TOOL,
    log: () => {},
    run: async ({ order, context }) => {
      r.running++;
      r.maxRunning = Math.max(r.maxRunning, r.running);
      try {
        await gate?.(context);
        const id = context.effect.effect_id;
        r.applied.set(id, (r.applied.get(id) ?? 0) + 1);
        r.events.push(order.order_id);
        return createToolResult(
          { posted: id },
          { effectReceipt: context.createEffectReceipt({ outcome: "applied", receipt_ref: `r:${id}` }) },
        );
      } finally {
        r.running--;
      }
    },
  });
  return r;
}

// worker runs connect until the returned stop is called (or the test ends).
function worker(t, w, tool, options = {}) {
  const controller = new AbortController();
  const logs = [];
  const done = connect({
    url: w.url, token: TOKEN, tools: [tool], takeWaitMs: 5000, signal: controller.signal,
    log: (msg) => logs.push(msg), ...options,
  });
  let settled = false;
  done.then(() => (settled = true), () => (settled = true));
  t.after(() => {
    controller.abort();
    return done.catch(() => {});
  });
  return { done, logs, settled: () => settled, stop: () => controller.abort() };
}

const ids = (prefix, n) => Array.from({ length: n }, (_, i) => `${prefix}-${String(i).padStart(2, "0")}`);

// assertAppliedOnce checks that each effect of the journal is applied and
// that the remote side applied it exactly once.
async function assertAppliedOnce(w, r, n) {
  const effects = await w.effects();
  assert.equal(effects.length, n, "one effect per delivery");
  for (const e of effects) {
    assert.equal(e.state, "applied", `effect ${e.effect_id}`);
    assert.equal(r.applied.get(e.effect_id), 1, `effect ${e.effect_id} applied ${r.applied.get(e.effect_id)} times`);
  }
  assert.equal(r.applied.size, n);
}

test("connect: calls are answered, entries end done, each effect applied once", { skip }, async (t) => {
  const w = await world(t);
  const r = recorder();
  const wk = worker(t, w, r.tool, { maxInFlight: 4 });
  await w.send(...ids("a", 20));
  await w.waitDone(20);
  await assertAppliedOnce(w, r, 20);
  wk.stop();
  await wk.done;
});

test("connect: maxInFlight bounds the calls in hand", { skip }, async (t) => {
  const w = await world(t);
  const total = 12;
  let started = 0;
  // Each call waits until three are in hand (or all have started), then a
  // little longer: the window in which a worker ignoring maxInFlight would
  // take a fourth. The bound is asserted on what was seen, never timed.
  const r = recorder(async () => {
    started++;
    await waitFor(() => r.running >= 3 || started === total, 20_000, "three calls in hand");
    await new Promise((resolve) => setTimeout(resolve, 100)); // the window above
  });
  worker(t, w, r.tool, { maxInFlight: 3 });
  await w.send(...ids("m", total));
  await w.waitDone(total);
  assert.equal(r.maxRunning, 3, "at most maxInFlight calls in hand, and that many used");
  await assertAppliedOnce(w, r, total);
});

test("connect: a stop takes no more calls and finishes the call in hand", { skip }, async (t) => {
  const w = await world(t);
  let release;
  const released = new Promise((resolve) => (release = resolve));
  let inHand = false;
  const r = recorder(async () => {
    inHand = true;
    await released;
  });
  const wk = worker(t, w, r.tool, { maxInFlight: 1 });
  await w.send("s-1");
  await waitFor(() => inHand, 20_000, "the call to be in hand");
  wk.stop();
  // A negative check: connect must not resolve while the call is in hand
  // (it would within a few ms of the abort if it did not wait).
  await new Promise((resolve) => setTimeout(resolve, 200)); // time for a wrong resolve to show
  assert.equal(wk.settled(), false, "connect resolved with a call in hand");
  await w.send("s-2");
  release();
  await wk.done;
  // The answer was sent before connect resolved; the daemon journals it
  // after answering the POST, so the effect reads applied once its entry
  // is done (read at once, it was still dispatched under load, once).
  await w.waitDone(1);
  const effects = await w.effects();
  assert.deepEqual(effects.map((e) => e.state), ["applied"]);
  // s-2 was not taken: it waits for a worker, no effect begun.
  const pending = await w.entries("pending");
  assert.deepEqual(pending.map((e) => e.event_id), ["s-2"]);
  assert.deepEqual(r.events, ["s-1"]);
});

test("connect: reconnects after the daemon restarts and drains what was posted meanwhile in order", { skip }, async (t) => {
  const w = await world(t);
  const r = recorder();
  const wk = worker(t, w, r.tool, { maxInFlight: 1 });
  await w.send(...ids("before", 3));
  await w.waitDone(3);
  await w.stop();
  await waitFor(() => wk.logs.some((l) => l.includes("cannot reach")), 20_000, "the worker to say it lost the daemon");
  assert.equal(wk.settled(), false, "the worker stopped when the daemon went away");
  await w.start();
  await w.send(...ids("after", 6));
  await w.waitDone(9, 45_000);
  assert.deepEqual(r.events, w.accepted, "calls run in acceptance order");
  await waitFor(() => wk.logs.some((l) => l.includes("connected to") && l.includes("again")), 10_000, "the worker to say it is back");
  await assertAppliedOnce(w, r, 9);
});

test("connect: a wrong token (401) or a tool the token does not serve (403) is fatal", { skip }, async (t) => {
  const w = await world(t);
  const r = recorder();
  await assert.rejects(
    connect({ url: w.url, token: "not-the-token", tools: [r.tool], log: () => {} }),
    (err) => err instanceof ToubaWorkerRefusedError && err.status === 401 && err.code === "WorkerUnauthorized",
  );
  const other = createTool({ toolRef: "tool:wk/Nope", run: () => null });
  await assert.rejects(
    connect({ url: w.url, token: TOKEN, tools: [other], log: () => {} }),
    (err) => err instanceof ToubaWorkerRefusedError && err.status === 403 && err.code === "WorkerForbidden",
  );
});

test("connect: bad options are a TypeError", async () => {
  const tool = createTool({ toolRef: POST_TOOL, run: () => null });
  await assert.rejects(connect({ url: "localhost:1", token: "t", tools: [tool] }), TypeError);
  await assert.rejects(connect({ url: "http://x", token: "", tools: [tool] }), TypeError);
  await assert.rejects(connect({ url: "http://x", token: "t", tools: [] }), TypeError);
  await assert.rejects(connect({ url: "http://x", token: "t", tools: [tool], maxInFlight: 0 }), TypeError);
  await assert.rejects(connect({ url: "http://x", token: "t", tools: [tool], maxInflight: 2 }), TypeError);
});

// stubDaemon is a stand-in for the daemon's worker wire that answers the
// first takes 503, then hands out calls once, then none; answers are
// recorded, the first refused 500.
async function stubDaemon(calls) {
  const s = { takes: 0, answers: [], handedOut: false };
  s.server = createServer((req, res) => {
    let body = "";
    req.on("data", (c) => (body += c));
    req.on("end", () => {
      const send = (status, doc) => {
        res.writeHead(status, { "Content-Type": "application/json" });
        res.end(JSON.stringify(doc));
      };
      if (req.url === "/workers/v1/take") {
        s.takes++;
        if (s.takes <= 2) return send(503, { error: { code: "Unavailable", message: "shutting down" } });
        if (!s.handedOut) {
          s.handedOut = true;
          return send(200, { calls });
        }
        return setTimeout(() => send(200, { calls: [] }), 20); // a short long-poll
      }
      s.answers.push(JSON.parse(body));
      if (s.answers.length === 1) return send(500, { error: { code: "Internal", message: "try again" } });
      return send(200, { status: "recorded" });
    });
  });
  await new Promise((resolve) => s.server.listen(0, "127.0.0.1", resolve));
  s.url = `http://127.0.0.1:${s.server.address().port}`;
  return s;
}

test("connect: 5xx is retried with backoff and said; ToubaNoAnswer sends no answer; an answer is retried", async (t) => {
  const s = await stubDaemon([request("a", { n: 1 }), request("b", { n: 2 })]);
  t.after(() => s.server.close());
  const tool = createTool({
    toolRef: TOOL_REF,
    run: ({ n, context }) => {
      if (context.call_id === "b") throw new ToubaNoAnswer();
      return { n };
    },
  });
  const controller = new AbortController();
  const logs = [];
  const done = connect({ url: s.url, token: "t", tools: [tool], takeWaitMs: 1000, signal: controller.signal, log: (m) => logs.push(m) });
  await waitFor(() => s.answers.length >= 2, 20_000, "the answer to be sent again after a 500");
  controller.abort();
  await done;
  assert.equal(logs.filter((l) => l.includes("cannot reach") && l.includes("503")).length, 2, logs.join("\n"));
  assert.ok(logs.some((l) => l.includes("connected to") && l.includes("again")), logs.join("\n"));
  assert.deepEqual(s.answers.map((a) => a.call_id), ["a", "a"], "b is not answered");
  assert.deepEqual(s.answers[1], { call_id: "a", ok: true, output: { n: 1 } });
});
