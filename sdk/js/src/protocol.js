// The wire side of touba-tool-handler-v1 (SPEC §4): constants, the error
// codes the SDK answers with on its own, and the check of a request
// document before any user code sees it.

/** The only handler protocol this SDK speaks. */
export const PROTOCOL = "touba-tool-handler-v1";

/** The environment variable the host sets to "persistent" (SPEC §4.1). */
export const MODE_ENV = "TOUBA_HANDLER_MODE";

/** Error codes the SDK answers with before or around the tool's run. */
export const Codes = Object.freeze({
  /** The request is not a well-formed touba-tool-handler-v1 request. */
  ProtocolError: "HandlerProtocolError",
  /** The request names another tool than this one. */
  ToolRefMismatch: "ToolRefMismatch",
  /** context.grants lacks one of the tool's requiredGrants; run is not called. */
  GrantMissing: "GrantMissing",
  /** The input does not match the tool's inputSignature; run is not called. */
  InputInvalid: "ToolInputInvalid",
  /** run threw something other than a ToubaHandlerError, or its output cannot be encoded. */
  Failed: "HandlerFailed",
});

/** The outcomes an effect receipt may state. */
export const Outcomes = Object.freeze(["applied", "not_applied", "unknown"]);

const OPERATIONS = ["invoke", "compensate"];

const isObject = (v) => typeof v === "object" && v !== null && !Array.isArray(v);

/**
 * ProtocolError is a request that cannot be served; message is safe to
 * send back (it names fields, never values).
 */
export class ProtocolError extends Error {}

/**
 * callIdOf returns context.call_id of a parsed document when there is one,
 * so that even a malformed request is answered under its call_id.
 */
export function callIdOf(doc) {
  const id = isObject(doc) && isObject(doc.context) ? doc.context.call_id : undefined;
  return typeof id === "string" ? id : "";
}

function field(obj, name, type, where, { optional = true } = {}) {
  const v = obj[name];
  if (v === undefined || v === null) {
    if (!optional) throw new ProtocolError(`${where}${name} is missing`);
    return undefined;
  }
  const ok =
    type === "integer" ? Number.isSafeInteger(v) : type === "array" ? Array.isArray(v) : typeof v === type;
  if (!ok) throw new ProtocolError(`${where}${name} is not a${type === "integer" || type === "array" ? "n" : ""} ${type}`);
  return v;
}

/**
 * parseRequest checks a parsed request document and returns it in the
 * shape the SDK uses. It throws a ProtocolError when the document is not a
 * touba-tool-handler-v1 request.
 */
export function parseRequest(doc) {
  if (!isObject(doc)) throw new ProtocolError(`request is not a JSON object of ${PROTOCOL}`);
  if (doc.protocol !== PROTOCOL) {
    throw new ProtocolError(`protocol ${JSON.stringify(String(doc.protocol ?? ""))} is not ${PROTOCOL}`);
  }
  if (!OPERATIONS.includes(doc.operation)) {
    throw new ProtocolError(`operation ${JSON.stringify(String(doc.operation ?? ""))} is not invoke or compensate`);
  }
  const toolRef = field(doc, "tool_ref", "string", "");
  const c = doc.context ?? {};
  if (!isObject(c)) throw new ProtocolError("context is not an object");
  const context = {
    trigger_ref: field(c, "trigger_ref", "string", "context.") ?? "",
    event_id: field(c, "event_id", "string", "context.") ?? "",
    queue_id: field(c, "queue_id", "string", "context.") ?? "",
    run_id: field(c, "run_id", "string", "context.") ?? "",
    call_id: field(c, "call_id", "string", "context.") ?? "",
    attempt: field(c, "attempt", "integer", "context.") ?? 0,
    deadline_unix_ms: field(c, "deadline_unix_ms", "integer", "context.") ?? 0,
    grants: field(c, "grants", "array", "context.") ?? [],
    // W3C trace context of the host's handler-call span; "" when the host
    // does not trace. Pass it on to join the delivery's trace.
    traceparent: field(c, "traceparent", "string", "context.") ?? "",
    effect: null,
  };
  if (!context.grants.every((g) => typeof g === "string")) {
    throw new ProtocolError("context.grants is not an array of strings");
  }
  if (c.effect !== undefined && c.effect !== null) {
    if (!isObject(c.effect)) throw new ProtocolError("context.effect is not an object");
    const e = c.effect;
    const effect = {
      scope: field(e, "scope", "string", "context.effect.") ?? "",
      effect_id: field(e, "effect_id", "string", "context.effect.") ?? "",
      fingerprint: field(e, "fingerprint", "string", "context.effect.") ?? "",
      retry_mode: field(e, "retry_mode", "string", "context.effect.") ?? "",
      attempt: field(e, "attempt", "integer", "context.effect.") ?? 0,
    };
    if (effect.effect_id === "" || effect.fingerprint === "") {
      throw new ProtocolError("context.effect lacks effect_id or fingerprint");
    }
    context.effect = Object.freeze(effect);
  }
  return {
    operation: doc.operation,
    toolRef: toolRef ?? "",
    input: doc.input === undefined ? null : doc.input,
    context,
  };
}
