// The receiving side of a webhook binding (SPEC §2.2, §4.2): the check of
// the daemon's X-Signature over the raw body, and a tool served over HTTP,
// the same tool defineTool serves as a process.

import { createHmac, timingSafeEqual } from "node:crypto";
import { Codes, PROTOCOL, ProtocolError, parseRequest } from "./protocol.js";
import { Tool } from "./tool.js";

/** The environment variable createHttpHandler reads the shared secret from. */
export const SECRET_ENV = "TOUBA_WEBHOOK_SECRET";

/** The header that carries the signature, `sha256=<hex>`. */
export const SIGNATURE_HEADER = "x-signature";

/** The header that carries the call's effect_id (its call_id without an effect). */
export const IDEMPOTENCY_KEY_HEADER = "idempotency-key";

/**
 * The header every answer carries, set to PROTOCOL: what tells the daemon
 * that the body is a protocol response (SPEC §2.2, §4.2).
 */
export const PROTOCOL_HEADER = "touba-protocol";

/** The default bound of a request body: the daemon's default max_payload_bytes. */
export const DEFAULT_MAX_BODY_BYTES = 1 << 20;

/** Codes of the answers createHttpHandler makes before the protocol request is read. */
export const HttpCodes = Object.freeze({
  /** 401: X-Signature missing, malformed or wrong; nothing ran. */
  SignatureInvalid: "SignatureInvalid",
  /** 413: the body is over the limit; nothing ran. */
  PayloadTooLarge: "HandlerPayloadTooLarge",
  /** 405: any method but POST. */
  MethodNotAllowed: "MethodNotAllowed",
  /** 500: the body cannot be had as raw bytes (a body parser took it). */
  RawBodyUnavailable: "RawBodyUnavailable",
});

/**
 * ToubaSignatureError is a refused signature. reason is "missing",
 * "malformed" or "mismatch".
 */
export class ToubaSignatureError extends Error {
  constructor(reason, message) {
    super(message);
    this.name = "ToubaSignatureError";
    this.reason = reason;
  }
}

const SIGNATURE = /^sha256=([0-9a-fA-F]{64})$/;

/**
 * verifySignature checks signatureHeader, the X-Signature value of a
 * request from a touba-trigger webhook binding, against rawBody and the
 * binding's shared secret (its credentials.hmac_secret), and throws a
 * ToubaSignatureError unless it matches.
 *
 * What is signed is the raw request body exactly as it arrived, every byte,
 * before any JSON parsing: the header is "sha256=" and the hex HMAC-SHA256
 * of the body keyed with the secret's UTF-8 bytes. The daemon writes the hex
 * in lowercase; either case is accepted, as is space around the value. The
 * comparison is in constant time. rawBody is a Buffer or Uint8Array; a
 * string is taken as its UTF-8 bytes, which are the bytes sent only if
 * nothing decoded and re-encoded it. A parsed object cannot be verified
 * and throws a TypeError. Same as
 *   printf '%s' "$BODY" | openssl dgst -sha256 -hmac "$SECRET"
 */
export function verifySignature(rawBody, signatureHeader, secret) {
  if (typeof secret !== "string" || secret === "") throw new TypeError("verifySignature: no secret");
  let body;
  if (typeof rawBody === "string") body = Buffer.from(rawBody, "utf8");
  else if (rawBody instanceof Uint8Array) body = rawBody;
  else throw new TypeError("verifySignature: rawBody must be the raw bytes (a Buffer), not a parsed body");
  const header = Array.isArray(signatureHeader) ? signatureHeader.join(",") : signatureHeader;
  const value = typeof header === "string" ? header.trim() : "";
  if (value === "") throw new ToubaSignatureError("missing", "no X-Signature header");
  const m = SIGNATURE.exec(value);
  if (!m) throw new ToubaSignatureError("malformed", "X-Signature is not sha256=<64 hex digits>");
  const want = createHmac("sha256", secret).update(body).digest();
  if (!timingSafeEqual(Buffer.from(m[1], "hex"), want)) {
    throw new ToubaSignatureError("mismatch", "X-Signature does not match the body and the secret");
  }
}

/**
 * createHttpHandler returns a request listener `(req, res)` for node:http
 * (also usable as an Express route handler) that serves tool, a Tool or a
 * definition as defineTool takes, as the target of a webhook binding:
 *
 * - a method other than POST: 405;
 * - a body over maxBodyBytes: 413;
 * - X-Signature missing, malformed or wrong: 401, and nothing runs;
 * - not a touba-tool-handler-v1 request, or an Idempotency-Key header that
 *   is not the signed body's effect_id (call_id without an effect): 400
 *   with HandlerProtocolError;
 * - else the tool runs, with context.idempotency_key set to the header, and
 *   the answer is 200 with the protocol response, which the daemon uses as
 *   is: the receipt, or a business error with ok false and its code.
 *
 * The raw body is needed. It is read from the stream, or taken from
 * req.rawBody or req.body when a middleware already read it as a Buffer
 * (express.raw({ type: "application/json" })) or a string. A req.body that
 * a JSON parser made (express.json()) cannot be verified: the answer is 500
 * RawBodyUnavailable, logged, and nothing runs.
 *
 * Options: secret (else the environment variable TOUBA_WEBHOOK_SECRET; one
 * of them is required, or this throws), maxBodyBytes (default 1 MiB).
 */
export function createHttpHandler(tool, { secret, maxBodyBytes = DEFAULT_MAX_BODY_BYTES } = {}) {
  const t = tool instanceof Tool ? tool : new Tool(tool);
  const key = secret ?? process.env[SECRET_ENV] ?? "";
  if (typeof key !== "string" || key === "") {
    throw new TypeError(`createHttpHandler: ${t.toolRef} has no secret: set ${SECRET_ENV} or pass { secret }`);
  }
  if (!Number.isSafeInteger(maxBodyBytes) || maxBodyBytes <= 0) {
    throw new TypeError("createHttpHandler: maxBodyBytes is not a positive integer");
  }
  return async function toubaHttpHandler(req, res) {
    try {
      await serveHttp(t, key, maxBodyBytes, req, res);
    } catch (err) {
      t._log(`http: internal error: ${err?.stack ?? err}`);
      if (!res.headersSent) send(res, 500, failure(Codes.Failed, "the handler failed"));
      else res.destroy();
    }
  };
}

async function serveHttp(tool, secret, limit, req, res) {
  if (req.method !== "POST") {
    res.setHeader("Allow", "POST");
    return send(res, 405, failure(HttpCodes.MethodNotAllowed, "only POST is served"));
  }
  const got = await rawBody(req, limit);
  if (got.error === "too-large") {
    return send(res, 413, failure(HttpCodes.PayloadTooLarge, `request body over ${limit} bytes`), { close: true });
  }
  if (got.error) {
    tool._log(`http: ${got.error}`);
    return send(res, 500, failure(HttpCodes.RawBodyUnavailable, got.error));
  }
  try {
    verifySignature(got.body, req.headers[SIGNATURE_HEADER], secret);
  } catch (err) {
    if (err instanceof ToubaSignatureError) return send(res, 401, failure(HttpCodes.SignatureInvalid, err.message));
    throw err;
  }
  let doc;
  let parsed;
  try {
    doc = JSON.parse(got.body.toString("utf8"));
    parsed = parseRequest(doc);
  } catch (err) {
    if (err instanceof SyntaxError) return send(res, 400, failure(Codes.ProtocolError, `request is not JSON: ${err.message}`));
    if (err instanceof ProtocolError) return send(res, 400, failure(Codes.ProtocolError, err.message));
    throw err;
  }
  const header = req.headers[IDEMPOTENCY_KEY_HEADER];
  const idempotencyKey = typeof header === "string" && header !== "" ? header : null;
  const effect = parsed.context.effect;
  const want = effect ? effect.effect_id : parsed.context.call_id;
  if (idempotencyKey !== null && idempotencyKey !== want) {
    const field = effect ? "context.effect.effect_id" : "context.call_id";
    return send(res, 400, failure(Codes.ProtocolError, `Idempotency-Key is not the request's ${field}`));
  }
  // The daemon disconnects when it gives up on the call: tell run.
  const gone = new AbortController();
  const onClose = () => {
    if (!res.writableFinished) gone.abort(new Error("the caller went away"));
  };
  res.on("close", onClose);
  try {
    const resp = await tool.answer(doc, gone.signal, { idempotencyKey });
    return send(res, 200, resp);
  } finally {
    res.off("close", onClose);
  }
}

// rawBody returns { body } with the request's raw bytes, or { error }.
async function rawBody(req, limit) {
  for (const v of [req.rawBody, req.body]) {
    if (Buffer.isBuffer(v) || typeof v === "string") {
      const body = Buffer.isBuffer(v) ? v : Buffer.from(v, "utf8");
      return body.length > limit ? { error: "too-large" } : { body };
    }
  }
  if (req.body !== undefined && req.body !== null) {
    return {
      error:
        "the raw body is needed to verify X-Signature, but req.body was already parsed: " +
        'mount express.raw({ type: "application/json" }) on this route, or the handler before express.json()',
    };
  }
  if (req.readableEnded) return { error: "the request body was already read by someone else" };
  const declared = Number(req.headers["content-length"]);
  if (Number.isFinite(declared) && declared > limit) {
    req.resume(); // let it drain; the answer closes the connection
    return { error: "too-large" };
  }
  return new Promise((resolve, reject) => {
    // Listeners rather than for await: leaving that loop early would
    // destroy the socket before the 413 is sent.
    const chunks = [];
    let total = 0;
    const done = (v) => {
      req.off("data", onData);
      req.off("end", onEnd);
      req.off("error", onError);
      resolve(v);
    };
    const onData = (chunk) => {
      total += chunk.length;
      if (total > limit) {
        done({ error: "too-large" });
        req.resume(); // drain the rest unread; the answer closes the connection
        return;
      }
      chunks.push(chunk);
    };
    const onEnd = () => done({ body: Buffer.concat(chunks) });
    const onError = (err) => {
      req.off("data", onData);
      req.off("end", onEnd);
      reject(err);
    };
    req.on("data", onData);
    req.on("end", onEnd);
    req.on("error", onError);
  });
}

function failure(code, message) {
  return { ok: false, error: { code, message } };
}

function send(res, status, resp, { close = false } = {}) {
  let text;
  try {
    text = JSON.stringify(resp);
  } catch {
    status = 500;
    text = JSON.stringify(failure(Codes.Failed, "the response cannot be encoded"));
  }
  const body = Buffer.from(text + "\n", "utf8");
  res.statusCode = status;
  res.setHeader("Content-Type", "application/json");
  res.setHeader("Content-Length", body.length);
  res.setHeader("Cache-Control", "no-store");
  res.setHeader("Touba-Protocol", PROTOCOL);
  if (close) res.setHeader("Connection", "close");
  res.end(body);
}
