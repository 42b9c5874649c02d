// A local orders API, the stand-in for your own service, that the binding
// tool:examples.stripe/MarkOrderPaid calls directly: no adapter, no SDK.
//
//   PUT /orders/<order id>/payment   Authorization: Bearer $ORDERS_API_TOKEN
//                                    Idempotency-Key: <the effect id>
//
// The body is the step's input, which the program computes with CEL: the
// invoice, the amount in units (not cents) and the currency upper case.
//
// It answers 401 without the token, 400 without an Idempotency-Key, 201
// when it records the payment and 200 with the same answer when the key
// comes again (the daemon repeats a call whose answer it lost: the binding's
// retry_mode idempotency_key is true because of this). Records go to
// .touba/orders.jsonl, one line per key.
//
// Environment: ORDERS_API_TOKEN (required), PORT (default 8787; 0 picks a
// free one). It prints "listening on 127.0.0.1:<port>" once it listens.

import { timingSafeEqual } from "node:crypto";
import { appendFileSync, mkdirSync, readFileSync } from "node:fs";
import { createServer } from "node:http";

const token = process.env.ORDERS_API_TOKEN ?? "";
if (token === "") {
  console.error("orders_api: set ORDERS_API_TOKEN");
  process.exit(2);
}
const file = ".touba/orders.jsonl";

function records() {
  try {
    return readFileSync(file, "utf8").split("\n").filter(Boolean).map((l) => JSON.parse(l));
  } catch (err) {
    if (err.code === "ENOENT") return [];
    throw err;
  }
}

function authorized(header) {
  const want = Buffer.from(`Bearer ${token}`);
  const got = Buffer.from(header ?? "");
  return got.length === want.length && timingSafeEqual(got, want);
}

function answer(res, status, body, headers = {}) {
  res.writeHead(status, { "Content-Type": "application/json", ...headers });
  res.end(JSON.stringify(body));
}

const server = createServer((req, res) => {
  const chunks = [];
  req.on("data", (c) => chunks.push(c));
  req.on("end", () => {
    const m = /^\/orders\/([^/]+)\/payment$/.exec(req.url ?? "");
    if (req.method !== "PUT" || !m) return answer(res, 404, { error: "not found" });
    if (!authorized(req.headers.authorization)) return answer(res, 401, { error: "bad token" });
    const key = req.headers["idempotency-key"];
    if (!key) return answer(res, 400, { error: "Idempotency-Key required" });
    const orderId = decodeURIComponent(m[1]);
    const earlier = records().find((r) => r.idempotency_key === key);
    if (earlier) {
      return answer(res, 200, { order_id: earlier.order_id, status: "paid" }, { "Idempotent-Replayed": "true" });
    }
    let payment;
    try {
      payment = JSON.parse(Buffer.concat(chunks).toString("utf8"));
    } catch {
      return answer(res, 400, { error: "body is not JSON" });
    }
    const rec = { idempotency_key: key, order_id: orderId, invoice: payment.invoice, amount: payment.amount, currency: payment.currency };
    mkdirSync(".touba", { recursive: true });
    appendFileSync(file, JSON.stringify(rec) + "\n");
    answer(res, 201, { order_id: orderId, status: "paid" }, { Location: `/orders/${encodeURIComponent(orderId)}` });
  });
});

server.listen(Number(process.env.PORT ?? 8787), "127.0.0.1", () => {
  console.log(`listening on 127.0.0.1:${server.address().port}`);
});
