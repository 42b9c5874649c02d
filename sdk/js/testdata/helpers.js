// Helpers shared by the tests in ../test (kept out of test/ so that
// node --test does not run them as a test file).

import { PassThrough } from "node:stream";
import { createInterface } from "node:readline";
import { servePersistent } from "../src/index.js";

export const TOOL_REF = "tool:test/Echo";
export const FINGERPRINT = "sha256:" + "ab".repeat(32);

/** request returns a valid request document; effect adds context.effect. */
export function request(callId, input, { effect = false, grants = ["network"] } = {}) {
  const req = {
    protocol: "touba-tool-handler-v1",
    operation: "invoke",
    tool_ref: TOOL_REF,
    input,
    context: {
      trigger_ref: "trigger:test/T",
      event_id: "evt-1",
      queue_id: "q1",
      run_id: "r1",
      call_id: callId,
      attempt: 1,
      deadline_unix_ms: 0,
      grants,
    },
  };
  if (effect) {
    req.context.effect = {
      scope: "q1",
      effect_id: `q1:${callId}`,
      fingerprint: FINGERPRINT,
      retry_mode: "idempotency_key",
      attempt: 1,
    };
  }
  return req;
}

/** errorReceipt returns the receipt in error.details, or null. */
export function errorReceipt(resp) {
  return resp.error?.details?.effect_receipt ?? null;
}

/** quiet is a tool log that keeps lines for assertions instead of printing them. */
export function quiet() {
  const lines = [];
  const log = (msg) => lines.push(msg);
  log.lines = lines;
  return log;
}

/**
 * persistentSession runs servePersistent on in-memory streams. send writes
 * a request line; next resolves with the next response, parsed; done
 * resolves when servePersistent does.
 */
export function persistentSession(tool, { signal } = {}) {
  const input = new PassThrough();
  const output = new PassThrough();
  const done = servePersistent(tool, input, output, { signal }).finally(() => output.end());
  const rl = createInterface({ input: output, crlfDelay: Infinity });
  const lines = rl[Symbol.asyncIterator]();
  return {
    send(doc) {
      input.write((typeof doc === "string" ? doc : JSON.stringify(doc)) + "\n");
    },
    async next() {
      const { value, done: ended } = await lines.next();
      if (ended) throw new Error("no more responses");
      return JSON.parse(value);
    },
    close() {
      input.end();
    },
    done,
  };
}
