// verifySignature and createHttpHandler: the receiving side of a webhook
// binding (SPEC §4.2).

import assert from "node:assert/strict";
import { createHmac } from "node:crypto";
import { createServer } from "node:http";
import test from "node:test";
import {
  HttpCodes,
  PROTOCOL,
  ToubaHandlerError,
  ToubaSignatureError,
  createHttpHandler,
  createTool,
  createToolResult,
  verifySignature,
} from "../src/index.js";
import { TOOL_REF, quiet, request } from "../testdata/helpers.js";

// The published cross-check, the same literal as in the Go and Python SDK
// tests. The signature was computed by openssl, not by the SDK:
//
//   printf '%s' '{"tool_ref":"tool:sdk.test/Echo","input":{"note":"café ✓"}}' \
//     | openssl dgst -sha256 -hmac 'whsec-cross-check-2f7d'
//
// The body is UTF-8 ("é" is c3 a9): the bytes are signed, not characters.
const CROSS_BODY = '{"tool_ref":"tool:sdk.test/Echo","input":{"note":"café ✓"}}';
const CROSS_SECRET = "whsec-cross-check-2f7d";
const CROSS_SIG = "sha256=0ccc32aa8c680aaf8c10389be3f71dd438405a7f5ed35b6c37172f5c6776fb20";

const SECRET = "whsec-sdk-http-test";

// sign is the test's own signer, written from SPEC §2.2.
const sign = (secret, body) => "sha256=" + createHmac("sha256", secret).update(body).digest("hex");

test("verifySignature: the openssl cross-check verifies, as bytes and as a string", () => {
  verifySignature(Buffer.from(CROSS_BODY, "utf8"), CROSS_SIG, CROSS_SECRET);
  verifySignature(CROSS_BODY, CROSS_SIG, CROSS_SECRET);
  verifySignature(new Uint8Array(Buffer.from(CROSS_BODY, "utf8")), CROSS_SIG, CROSS_SECRET);
});

test("verifySignature: refusals say why", () => {
  const body = Buffer.from(CROSS_BODY, "utf8");
  const hex = CROSS_SIG.slice("sha256=".length);
  verifySignature(body, "sha256=" + hex.toUpperCase(), CROSS_SECRET);
  verifySignature(body, `  ${CROSS_SIG} `, CROSS_SECRET);
  const cases = [
    [undefined, "missing"],
    ["", "missing"],
    ["  ", "missing"],
    [hex, "malformed"],
    ["sha1=" + hex, "malformed"],
    ["SHA256=" + hex, "malformed"],
    [CROSS_SIG.slice(0, -2), "malformed"],
    [CROSS_SIG + "00", "malformed"],
    [CROSS_SIG.slice(0, -1) + "g", "malformed"], // Buffer.from(hex) would silently stop there
    [`${CROSS_SIG}, ${CROSS_SIG}`, "malformed"],
    [sign("other", body), "mismatch"],
  ];
  for (const [header, reason] of cases) {
    assert.throws(
      () => verifySignature(body, header, CROSS_SECRET),
      (err) => err instanceof ToubaSignatureError && err.reason === reason,
      `header ${JSON.stringify(header)}: want ${reason}`,
    );
  }
  assert.throws(() => verifySignature(Buffer.concat([body, Buffer.from(" ")]), CROSS_SIG, CROSS_SECRET), {
    reason: "mismatch",
  });
  // Re-encoded JSON is other bytes.
  assert.throws(() => verifySignature(JSON.stringify(JSON.parse(CROSS_BODY), null, 1), CROSS_SIG, CROSS_SECRET), {
    reason: "mismatch",
  });
  assert.throws(() => verifySignature(JSON.parse(CROSS_BODY), CROSS_SIG, CROSS_SECRET), TypeError);
  assert.throws(() => verifySignature(body, CROSS_SIG, ""), TypeError);
});

// A tool that counts its runs, answers an applied receipt whose ref is the
// idempotency key it saw, or the business error its input asks for.
function countingTool() {
  const seen = { runs: 0, keys: [] };
  const tool = createTool({
    toolRef: TOOL_REF,
    requiredGrants: ["network"],
    log: quiet(),
    run: async ({ fail, context }) => {
      seen.runs++;
      seen.keys.push(context.idempotency_key);
      if (fail) {
        throw new ToubaHandlerError(fail, "refused", {
          effect_receipt: context.createEffectReceipt({ outcome: "not_applied" }),
        });
      }
      const key = context.idempotency_key;
      return createToolResult(
        { key },
        context.createEffectReceipt
          ? { effectReceipt: context.createEffectReceipt({ outcome: "applied", receipt_ref: `ref:${key}` }) }
          : {},
      );
    },
  });
  return { tool, seen };
}

// listen serves listener on 127.0.0.1, port 0, and returns its URL.
async function listen(t, listener) {
  const server = createServer(listener);
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  t.after(() => new Promise((resolve) => server.close(resolve)));
  return `http://127.0.0.1:${server.address().port}/hook`;
}

async function post(url, body, { sig, key, method = "POST", headers = {} } = {}) {
  const h = { "content-type": "application/json", ...headers };
  if (sig !== null) h["x-signature"] = sig ?? sign(SECRET, body);
  if (key) h["idempotency-key"] = key;
  const res = await fetch(url, { method, headers: h, body: method === "GET" ? undefined : body });
  return {
    status: res.status,
    resp: await res.json(),
    allow: res.headers.get("allow"),
    protocol: res.headers.get("touba-protocol"),
  };
}

test("createHttpHandler: what runs and what is answered", async (t) => {
  const { tool, seen } = countingTool();
  const url = await listen(t, createHttpHandler(tool, { secret: SECRET, maxBodyBytes: 4096 }));
  const call = JSON.stringify(request("c1", {}, { effect: true }));
  const failing = JSON.stringify(request("c2", { fail: "ExternalWriteRefused" }, { effect: true }));
  const noEffect = JSON.stringify(request("c3", {}));
  const big = JSON.stringify(request("c4", { pad: "x".repeat(5000) }, { effect: true }));
  const cases = [
    { name: "applied", body: call, key: "q1:c1", status: 200, ran: true, receipt: ["applied", "ref:q1:c1"] },
    { name: "no effect, call_id as key", body: noEffect, key: "c3", status: 200, ran: true },
    { name: "business error keeps its code", body: failing, key: "q1:c2", status: 200, code: "ExternalWriteRefused", ran: true },
    { name: "GET", method: "GET", body: "", sig: null, status: 405, code: HttpCodes.MethodNotAllowed },
    { name: "unsigned", body: call, sig: null, status: 401, code: HttpCodes.SignatureInvalid },
    { name: "malformed", body: call, sig: "sha256=xyz", status: 401, code: HttpCodes.SignatureInvalid },
    { name: "tampered", body: call.replace('"c1"', '"c9"'), sig: sign(SECRET, call), status: 401, code: HttpCodes.SignatureInvalid },
    { name: "other secret", body: call, sig: sign("other", call), status: 401, code: HttpCodes.SignatureInvalid },
    { name: "too large", body: big, status: 413, code: HttpCodes.PayloadTooLarge },
    { name: "not JSON", body: "{nope", status: 400, code: "HandlerProtocolError" },
    { name: "other protocol", body: call.replace("touba-tool-handler-v1", "v0"), status: 400, code: "HandlerProtocolError" },
    { name: "key not the effect id", body: call, key: "q1:other", status: 400, code: "HandlerProtocolError" },
    { name: "key not the call id", body: noEffect, key: "c9", status: 400, code: "HandlerProtocolError" },
  ];
  for (const tc of cases) {
    const before = seen.runs;
    const { status, resp, allow, protocol } = await post(url, tc.body, tc);
    assert.equal(status, tc.status, `${tc.name}: ${JSON.stringify(resp)}`);
    // The header is what tells the daemon the body is a protocol response.
    assert.equal(protocol, PROTOCOL, `${tc.name}: Touba-Protocol header`);
    assert.equal(resp.error?.code, tc.code, `${tc.name}: ${JSON.stringify(resp)}`);
    assert.equal(resp.ok, tc.code === undefined, tc.name);
    assert.equal(seen.runs - before, tc.ran ? 1 : 0, `${tc.name}: runs`);
    if (tc.receipt) {
      assert.deepEqual([resp.effect_receipt.outcome, resp.effect_receipt.receipt_ref], tc.receipt, tc.name);
    }
    if (tc.method === "GET") assert.equal(allow, "POST");
  }
  assert.deepEqual(seen.keys, ["q1:c1", "c3", "q1:c2"]);
});

test("createHttpHandler: a body a middleware read (Express) is used when raw, refused when parsed", async (t) => {
  const { tool, seen } = countingTool();
  const handler = createHttpHandler(tool, { secret: SECRET });
  // Stand-ins for express.raw(), express.text() and express.json().
  const middleware = (kind) => async (req, res) => {
    const chunks = [];
    for await (const c of req) chunks.push(c);
    const raw = Buffer.concat(chunks);
    req.body = kind === "raw" ? raw : kind === "text" ? raw.toString("utf8") : JSON.parse(raw.toString("utf8"));
    return handler(req, res);
  };
  const call = JSON.stringify(request("c1", { note: "café ✓" }, { effect: true }));
  for (const kind of ["raw", "text"]) {
    const url = await listen(t, middleware(kind));
    const { status, resp } = await post(url, call, { key: "q1:c1" });
    assert.equal(status, 200, `${kind}: ${JSON.stringify(resp)}`);
    assert.equal(resp.effect_receipt.outcome, "applied");
  }
  const url = await listen(t, middleware("json"));
  const { status, resp } = await post(url, call, { key: "q1:c1" });
  assert.equal(status, 500);
  assert.equal(resp.error.code, HttpCodes.RawBodyUnavailable);
  assert.match(resp.error.message, /raw body/);
  assert.equal(seen.runs, 2, "the parsed body ran nothing");
});

test("createHttpHandler: a streamed body over the limit is 413 without a Content-Length", async (t) => {
  const { tool, seen } = countingTool();
  const url = await listen(t, createHttpHandler(tool, { secret: SECRET, maxBodyBytes: 100 }));
  const body = new ReadableStream({
    start(c) {
      c.enqueue(new TextEncoder().encode("x".repeat(300)));
      c.close();
    },
  });
  const res = await fetch(url, { method: "POST", body, duplex: "half", headers: { "x-signature": sign(SECRET, "x") } });
  assert.equal(res.status, 413);
  assert.equal(seen.runs, 0);
});

test("createHttpHandler: the secret comes from TOUBA_WEBHOOK_SECRET, and one is required", () => {
  const { tool } = countingTool();
  const saved = process.env.TOUBA_WEBHOOK_SECRET;
  try {
    delete process.env.TOUBA_WEBHOOK_SECRET;
    assert.throws(() => createHttpHandler(tool), /TOUBA_WEBHOOK_SECRET/);
    process.env.TOUBA_WEBHOOK_SECRET = SECRET;
    assert.equal(typeof createHttpHandler(tool), "function");
    // A definition works as well as a Tool.
    assert.equal(typeof createHttpHandler({ toolRef: TOOL_REF, run: () => 1 }), "function");
  } finally {
    if (saved === undefined) delete process.env.TOUBA_WEBHOOK_SECRET;
    else process.env.TOUBA_WEBHOOK_SECRET = saved;
  }
});
