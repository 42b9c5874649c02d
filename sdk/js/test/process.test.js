// The SDK in a real child process, as the host runs it: one-shot without
// TOUBA_HANDLER_MODE, line-framed with TOUBA_HANDLER_MODE=persistent.

import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { once } from "node:events";
import { createInterface } from "node:readline";
import test from "node:test";
import { fileURLToPath } from "node:url";
import { request } from "../testdata/helpers.js";

const HANDLER = fileURLToPath(new URL("../testdata/echo.handler.mjs", import.meta.url));

// start runs the echo handler with only what the host passes (PATH, and
// the mode when persistent) and collects its stdout and stderr.
function start(t, { persistent = false } = {}) {
  const env = { PATH: process.env.PATH };
  if (persistent) env.TOUBA_HANDLER_MODE = "persistent";
  const child = spawn(process.execPath, [HANDLER], { env, stdio: ["pipe", "pipe", "pipe"] });
  t.after(() => child.kill("SIGKILL"));
  let stderr = "";
  child.stderr.on("data", (d) => (stderr += d));
  const exited = once(child, "exit").then(([code, signal]) => ({ code, signal, stderr }));
  const lines = createInterface({ input: child.stdout, crlfDelay: Infinity })[Symbol.asyncIterator]();
  return {
    child,
    exited,
    stderr: () => stderr,
    async next() {
      const { value, done } = await lines.next();
      assert.equal(done, false, `no response; stderr: ${stderr}`);
      return JSON.parse(value);
    },
  };
}

// within fails the test if p does not settle in ms.
function within(p, ms, what) {
  let timer;
  return Promise.race([
    p,
    new Promise((_, reject) => (timer = setTimeout(() => reject(new Error(`${what} within ${ms}ms`)), ms))),
  ]).finally(() => clearTimeout(timer));
}

test("process: one-shot answers one request and exits, without waiting for stdin to close", async (t) => {
  const h = start(t);
  h.child.stdin.write(JSON.stringify(request("c1", { linger: true }, { effect: true })));
  const resp = await within(h.next(), 10_000, "an answer");
  assert.equal(resp.ok, true);
  assert.equal(resp.output.mode, "one-shot");
  assert.equal(resp.effect_receipt.effect_id, "q1:c1");
  assert.equal("call_id" in resp, false);
  const { code } = await within(h.exited, 10_000, "exit despite a lingering timer");
  assert.equal(code, 0);
});

test("process: one-shot with empty stdin answers HandlerProtocolError", async (t) => {
  const h = start(t);
  h.child.stdin.end();
  const resp = await within(h.next(), 10_000, "an answer");
  assert.equal(resp.error.code, "HandlerProtocolError");
  assert.equal((await within(h.exited, 10_000, "exit")).code, 0);
});

test("process: persistent serves many calls on one process and exits when stdin closes", async (t) => {
  const h = start(t, { persistent: true });
  for (const id of ["a", "b", "c"]) h.child.stdin.write(JSON.stringify(request(id, { id })) + "\n");
  const seen = new Set();
  const pids = new Set();
  for (let i = 0; i < 3; i++) {
    const resp = await within(h.next(), 10_000, "an answer");
    assert.equal(resp.output.mode, "persistent");
    assert.equal(resp.output.echo.id, resp.call_id);
    seen.add(resp.call_id);
    pids.add(resp.output.pid);
  }
  assert.deepEqual([...seen].sort(), ["a", "b", "c"]);
  assert.equal(pids.size, 1);
  h.child.stdin.end();
  assert.equal((await within(h.exited, 10_000, "exit")).code, 0);
});

test("process: SIGTERM aborts the calls in flight, which still answer", async (t) => {
  const h = start(t, { persistent: true });
  h.child.stdin.write(JSON.stringify(request("w", { wait_for_abort: true })) + "\n");
  await within(
    new Promise((resolve) => {
      const check = () => (h.stderr().includes("waiting") ? resolve() : setTimeout(check, 5));
      check();
    }),
    10_000,
    "the call to start",
  );
  h.child.kill("SIGTERM");
  const resp = await within(h.next(), 10_000, "an answer after SIGTERM");
  assert.equal(resp.call_id, "w");
  assert.equal(resp.ok, true);
  assert.equal((await within(h.exited, 10_000, "exit")).code, 0);
});

test("process: an invalid definition exits non-zero without an answer", async (t) => {
  const child = spawn(
    process.execPath,
    ["--input-type=module", "-e", `import { defineTool } from ${JSON.stringify(new URL("../src/index.js", import.meta.url).href)}; await defineTool({ toolRef: "" });`],
    { env: { PATH: process.env.PATH }, stdio: ["pipe", "pipe", "pipe"] },
  );
  t.after(() => child.kill("SIGKILL"));
  let out = "";
  child.stdout.on("data", (d) => (out += d));
  const [code] = await within(once(child, "exit"), 10_000, "exit");
  assert.notEqual(code, 0);
  assert.equal(out, "");
});
