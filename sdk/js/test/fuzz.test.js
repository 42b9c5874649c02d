// A seeded random search over mangled requests: whatever arrives, the SDK
// answers exactly one JSON line with a boolean ok, never throws, and never
// sends a receipt that is not the request's.

import assert from "node:assert/strict";
import test from "node:test";
import { createTool, createToolResult } from "../src/index.js";
import { TOOL_REF, quiet, request } from "../testdata/helpers.js";

// mulberry32: a small deterministic PRNG, so a failure can be replayed by seed.
function prng(seed) {
  return () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const ODD_VALUES = [null, true, 0, -1, 1.5, "", "x", "\u2028", [], [1], {}, { a: 1 }, "tool:test/Echo", 2 ** 60];

function mangle(rand, doc) {
  const paths = [];
  const walk = (v, path) => {
    paths.push(path);
    if (v && typeof v === "object") for (const k of Object.keys(v)) walk(v[k], [...path, k]);
  };
  walk(doc, []);
  const path = paths[Math.floor(rand() * paths.length)];
  if (path.length === 0) return ODD_VALUES[Math.floor(rand() * ODD_VALUES.length)];
  let parent = doc;
  for (const k of path.slice(0, -1)) parent = parent[k];
  const key = path[path.length - 1];
  if (rand() < 0.3) delete parent[key];
  else parent[key] = ODD_VALUES[Math.floor(rand() * ODD_VALUES.length)];
  return doc;
}

test("fuzz: mangled requests always get one well-formed answer", async () => {
  const tool = createTool({
    toolRef: TOOL_REF,
    requiredGrants: ["network"],
    log: quiet(),
    run: async ({ context }) =>
      createToolResult("ok", { effectReceipt: context.createEffectReceipt?.({ outcome: "applied" }) }),
  });
  const rand = prng(7);
  for (let i = 0; i < 3000; i++) {
    let doc = request(`c${i}`, { a: [1, { b: "c" }] }, { effect: true });
    for (let m = 1 + Math.floor(rand() * 3); m > 0; m--) doc = mangle(rand, doc);
    let text = JSON.stringify(doc) ?? "";
    if (rand() < 0.1) text = text.slice(0, Math.floor(rand() * text.length));
    const persistent = rand() < 0.5;
    const line = await tool.handleLine(text, { persistent });
    assert.ok(line.endsWith("\n") && line.indexOf("\n") === line.length - 1, `case ${i}: not one line`);
    const resp = JSON.parse(line);
    assert.equal(typeof resp.ok, "boolean", `case ${i}`);
    if (persistent) assert.equal(typeof resp.call_id, "string", `case ${i}`);
    if (!resp.ok) assert.equal(typeof resp.error.code, "string", `case ${i}`);
    const receipt = resp.effect_receipt ?? resp.error?.details?.effect_receipt;
    if (receipt) {
      const effect = doc?.context?.effect;
      assert.equal(receipt.effect_id, effect.effect_id, `case ${i}`);
      assert.equal(receipt.fingerprint, effect.fingerprint, `case ${i}`);
    }
  }
});
