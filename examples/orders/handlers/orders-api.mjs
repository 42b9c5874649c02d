// The client of the orders provider, shared by the Node.js handlers. The
// daemon hands a handler only PATH, LANG, TZ and its binding's secrets, so
// the provider's address and token come through the manifest's "secrets".
//
// It tells the two ways a call can fail apart, because they mean different
// outcomes for a write: NotSent (the request certainly never reached the
// provider: refused connection, unknown host) is not_applied; anything else
// (a timeout, a connection lost after sending) may have been performed and
// is unknown.

import { ToubaHandlerError } from "@touba/sdk";

/** NotSent is a request that certainly never reached the provider. */
export class NotSent extends Error {}

const NOT_SENT_CODES = new Set(["ECONNREFUSED", "ENOTFOUND", "EAI_AGAIN"]);

/**
 * ordersApi sends one request to the provider and returns its status, its
 * JSON body and whether it was an idempotent replay.
 */
export async function ordersApi(method, path, { body, idempotencyKey, signal } = {}) {
  const base = process.env.ORDERS_API_URL;
  if (!base) {
    throw new ToubaHandlerError("OrdersApiNotConfigured", "ORDERS_API_URL is not set for this binding");
  }
  const headers = { accept: "application/json" };
  if (process.env.ORDERS_API_TOKEN) headers.authorization = `Bearer ${process.env.ORDERS_API_TOKEN}`;
  if (idempotencyKey) headers["idempotency-key"] = idempotencyKey;
  if (body !== undefined) headers["content-type"] = "application/json";
  let res;
  try {
    res = await fetch(base.replace(/\/+$/, "") + path, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      signal,
    });
  } catch (err) {
    if (NOT_SENT_CODES.has(err?.cause?.code)) throw new NotSent(err.cause.code);
    throw err;
  }
  const text = await res.text();
  let json = null;
  try {
    json = JSON.parse(text);
  } catch {
    // a non-JSON answer: status alone decides
  }
  return { status: res.status, body: json, replayed: res.headers.get("idempotent-replayed") === "true" };
}
