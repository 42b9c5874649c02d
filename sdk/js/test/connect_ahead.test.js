// connect against a stand-in for the daemon's worker wire: the calls a
// worker takes ahead of its room (ahead), their order, and a call taken
// ahead that is past its deadline before it can start. No go needed.

import assert from "node:assert/strict";
import { createServer } from "node:http";
import test from "node:test";
import { connect, createTool } from "../src/index.js";
import { waitFor } from "../testdata/daemon.js";
import { TOOL_REF, request } from "../testdata/helpers.js";

// stub hands out calls in order, up to each take's max, and records each
// take's max and each answer's call id.
async function stub(t, calls) {
  const s = { maxes: [], answered: [], handed: 0 };
  const server = createServer((req, res) => {
    let body = "";
    req.on("data", (chunk) => (body += chunk));
    req.on("end", () => {
      const doc = JSON.parse(body);
      let out = { status: "recorded" };
      let wait = 0;
      if (req.url === "/workers/v1/take") {
        s.maxes.push(doc.max);
        out = { calls: calls.slice(s.handed, s.handed + doc.max) };
        s.handed += out.calls.length;
        if (out.calls.length === 0) wait = 20; // a short long-poll: no call left
      } else {
        s.answered.push(doc.call_id);
      }
      setTimeout(() => {
        res.writeHead(200, { "Content-Type": "application/json" });
        res.end(JSON.stringify(out));
      }, wait);
    });
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  s.url = `http://127.0.0.1:${server.address().port}`;
  t.after(() => {
    server.close();
    server.closeAllConnections(); // a worker still taking keeps its connection busy
  });
  return s;
}

function calls(n) {
  return Array.from({ length: n }, (_, i) => request(`c${String(i).padStart(3, "0")}`, { n: i }));
}

// worker runs connect against s until the test ends.
function worker(t, s, run, options = {}) {
  const ac = new AbortController();
  const done = connect({ url: s.url, token: "t", tools: [createTool({ toolRef: TOOL_REF, run })], takeWaitMs: 50,
    signal: ac.signal, log: () => {}, ...options });
  t.after(() => {
    ac.abort();
    return done;
  });
}

test("connect: takes maxInFlight calls ahead, runs maxInFlight at once, in the order taken", async (t) => {
  const s = await stub(t, calls(12));
  let release;
  const gate = new Promise((resolve) => (release = resolve));
  t.after(() => release());
  let running = 0;
  let most = 0;
  const started = [];
  worker(t, s, async ({ n, context }) => {
    started.push(context.call_id);
    most = Math.max(most, ++running);
    await gate;
    running--;
    return { n };
  }, { maxInFlight: 2 });
  await waitFor(() => s.handed === 4, 20_000, "two calls running and two taken ahead");
  assert.equal(s.maxes[0], 4, "the first take asks for maxInFlight calls more than it can run");
  release();
  await waitFor(() => s.answered.length === 12, 20_000, "every call answered");
  assert.equal(most, 2, "at most maxInFlight calls run at once");
  assert.deepEqual(started, [...started].sort(), "calls start in the order taken");
});

test("connect: none taken ahead at maxInFlight 1 or with ahead 0", async (t) => {
  for (const options of [{ maxInFlight: 1 }, { maxInFlight: 3, ahead: 0 }]) {
    const s = await stub(t, calls(1));
    worker(t, s, async ({ n }) => ({ n }), options);
    await waitFor(() => s.maxes.length > 0, 20_000, "a take");
    assert.equal(s.maxes[0], options.maxInFlight, JSON.stringify(options));
  }
});

test("connect: a call past its deadline before it can start is not run", async (t) => {
  const cs = calls(2);
  cs[0].context.deadline_unix_ms = Date.now() - 1000;
  const s = await stub(t, cs);
  const ran = [];
  worker(t, s, async ({ n, context }) => {
    ran.push(context.call_id);
    return { n };
  });
  await waitFor(() => s.answered.length === 1, 20_000, "the call within its deadline answered");
  assert.deepEqual(ran, ["c001"]);
  assert.deepEqual(s.answered, ["c001"]);
});
