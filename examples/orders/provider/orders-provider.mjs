// A small local orders service for the example, in Node.js with no
// dependencies. It honours Idempotency-Key the way payment APIs do: the
// first request with a key is performed and its answer stored; a later
// request with the same key and the same body gets the stored answer
// (header Idempotent-Replayed: true) and performs nothing; the same key with
// another body is refused (422); a key whose first request is still running
// is refused with 409, so the caller retries later.
//
// State lives in this process's memory only: a restart of the provider
// forgets every order. That is enough to watch the daemon, which is what
// restarts in the walk-through.
//
//   PORT=8787 ORDERS_API_TOKEN=dev-token node provider/orders-provider.mjs
//
// Environment: PORT (default 8787; 0 picks a free port), HOST (default
// 127.0.0.1), ORDERS_API_TOKEN (when set, requests need
// "Authorization: Bearer <token>"), ORDERS_DELAY_MS (hold each write this
// long before performing it, to give you time to kill the daemon mid-call).
//
// API: GET /orders[?reference=R], GET /orders/<id>, POST /orders
// {reference, item, quantity}, GET /shipments, POST /shipments {order_id},
// GET /stats (requests and replays per route, for tests).

import { createServer } from "node:http";
import { isDeepStrictEqual } from "node:util";

const token = process.env.ORDERS_API_TOKEN ?? "";
const delayMs = Number(process.env.ORDERS_DELAY_MS ?? 0);

const orders = [];
const shipments = [];
const keys = new Map(); // "<route> <key>" -> { body, status, answer } or { body, inProgress: true }
const stats = { orders: { requests: 0, performed: 0, replays: 0 }, shipments: { requests: 0, performed: 0, replays: 0 } };

const routes = {
  orders: {
    validate(b) {
      if (typeof b.reference !== "string" || b.reference === "") return "reference is not a non-empty string";
      if (typeof b.item !== "string" || b.item === "") return "item is not a non-empty string";
      if (!Number.isSafeInteger(b.quantity) || b.quantity < 1) return "quantity is not a positive integer";
      return "";
    },
    perform(b) {
      const order = { id: `ord_${orders.length + 1}`, reference: b.reference, item: b.item, quantity: b.quantity,
        status: "created", created_at: new Date().toISOString() };
      orders.push(order);
      log(`created order ${order.id} for ${order.reference}`);
      return [201, order];
    },
  },
  shipments: {
    validate(b) {
      return typeof b.order_id === "string" && b.order_id !== "" ? "" : "order_id is not a non-empty string";
    },
    perform(b) {
      const order = orders.find((o) => o.id === b.order_id);
      if (!order) return [404, { error: "order_not_found", message: `no order ${b.order_id}` }];
      // One shipment per order: asking again (under another key) is
      // answered with the shipment that exists.
      const existing = shipments.find((s) => s.order_id === order.id);
      if (existing) return [200, existing];
      const shipment = { id: `shp_${shipments.length + 1}`, order_id: order.id, carrier: "local-post",
        tracking: `LP${String(shipments.length + 1).padStart(6, "0")}` };
      shipments.push(shipment);
      order.status = "shipped";
      log(`shipped order ${order.id} as ${shipment.id}`);
      return [201, shipment];
    },
  },
};

function log(msg) {
  process.stderr.write(`orders-provider: ${msg}\n`);
}

function send(res, status, body, headers = {}) {
  res.writeHead(status, { "content-type": "application/json", ...headers });
  res.end(JSON.stringify(body));
}

async function readJSON(req) {
  const chunks = [];
  for await (const c of req) chunks.push(c);
  return JSON.parse(Buffer.concat(chunks).toString("utf8"));
}

async function write(name, req, res) {
  const route = routes[name];
  stats[name].requests++;
  const key = req.headers["idempotency-key"];
  if (typeof key !== "string" || key === "") {
    return send(res, 400, { error: "idempotency_key_required", message: "send an Idempotency-Key header" });
  }
  let body;
  try {
    body = await readJSON(req);
  } catch {
    return send(res, 400, { error: "invalid_json", message: "the body is not JSON" });
  }
  const slot = `${name} ${key}`;
  const seen = keys.get(slot);
  if (seen) {
    if (!isDeepStrictEqual(seen.body, body)) {
      return send(res, 422, { error: "idempotency_key_reused", message: "this key was used with another body" });
    }
    if (seen.inProgress) {
      return send(res, 409, { error: "request_in_progress", message: "the first request with this key is still running" });
    }
    stats[name].replays++;
    log(`replayed ${name} for key ${key}`);
    return send(res, seen.status, seen.answer, { "idempotent-replayed": "true" });
  }
  const bad = route.validate(body ?? {});
  if (bad) return send(res, 400, { error: "invalid_request", message: bad });
  // Reserve the key before anything can interleave: Node runs this handler
  // to the next await without interruption.
  keys.set(slot, { body, inProgress: true });
  if (delayMs > 0) await new Promise((resolve) => setTimeout(resolve, delayMs));
  const [status, answer] = route.perform(body);
  if (status === 201) stats[name].performed++;
  if (status >= 500) keys.delete(slot);
  // A snapshot: a replay answers what the first request answered, even
  // after the order moved on (shipped).
  else keys.set(slot, { body, status, answer: structuredClone(answer) });
  send(res, status, answer);
}

const server = createServer(async (req, res) => {
  try {
    if (token && req.headers.authorization !== `Bearer ${token}`) {
      return send(res, 401, { error: "unauthorized", message: "missing or wrong bearer token" });
    }
    const url = new URL(req.url, "http://provider");
    const parts = url.pathname.split("/").filter(Boolean);
    if (req.method === "GET" && url.pathname === "/orders") {
      const ref = url.searchParams.get("reference");
      return send(res, 200, { orders: ref === null ? orders : orders.filter((o) => o.reference === ref) });
    }
    if (req.method === "GET" && parts[0] === "orders" && parts.length === 2) {
      const order = orders.find((o) => o.id === parts[1]);
      return order ? send(res, 200, order) : send(res, 404, { error: "order_not_found", message: `no order ${parts[1]}` });
    }
    if (req.method === "GET" && url.pathname === "/shipments") return send(res, 200, { shipments });
    if (req.method === "GET" && url.pathname === "/stats") return send(res, 200, stats);
    if (req.method === "POST" && url.pathname === "/orders") return await write("orders", req, res);
    if (req.method === "POST" && url.pathname === "/shipments") return await write("shipments", req, res);
    send(res, 404, { error: "not_found", message: `${req.method} ${url.pathname}` });
  } catch (err) {
    log(`internal error: ${err.stack}`);
    if (!res.headersSent) send(res, 500, { error: "internal", message: "internal error" });
  }
});

server.listen(Number(process.env.PORT ?? 8787), process.env.HOST ?? "127.0.0.1", () => {
  const { address, port } = server.address();
  // The first line of stdout, so a script or test can find a free port's number.
  process.stdout.write(`orders provider listening on http://${address}:${port}\n`);
});
process.on("SIGTERM", () => server.close(() => process.exit(0)));
