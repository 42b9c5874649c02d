// A tool: its definition, the checks made before its run, and the turning
// of whatever run does (result, ToubaHandlerError, any other throw) into
// exactly one response.

import { Codes, ProtocolError, callIdOf, parseRequest } from "./protocol.js";
import { ToolResult, ToubaHandlerError, bindReceiptFactory, receiptFor } from "./result.js";

const DEFINITION_KEYS = ["toolRef", "inputSignature", "outputType", "requiredGrants", "run", "log"];

// Type refs the SDK can check itself; any other type_ref (such as
// "type:examples.orders/CreateOrderInput") names a type the SDK does not
// know, so only the parameter's presence is checked.
const BUILTIN_TYPES = {
  "type:string": (v) => typeof v === "string",
  "type:number": (v) => typeof v === "number",
  "type:integer": (v) => Number.isSafeInteger(v),
  "type:boolean": (v) => typeof v === "boolean",
  "type:object": (v) => typeof v === "object" && v !== null && !Array.isArray(v),
  "type:array": (v) => Array.isArray(v),
  "type:any": () => true,
};

const isObject = (v) => typeof v === "object" && v !== null && !Array.isArray(v);

function checkDefinition(def) {
  if (!isObject(def)) throw new TypeError("defineTool: want a definition object");
  for (const key of Object.keys(def)) {
    if (!DEFINITION_KEYS.includes(key)) {
      throw new TypeError(`defineTool: unknown field ${JSON.stringify(key)} (want ${DEFINITION_KEYS.join(", ")})`);
    }
  }
  if (typeof def.toolRef !== "string" || def.toolRef === "") throw new TypeError("defineTool: toolRef is empty");
  if (typeof def.run !== "function") throw new TypeError("defineTool: run is not a function");
  const grants = def.requiredGrants ?? [];
  if (!Array.isArray(grants) || !grants.every((g) => typeof g === "string" && g !== "")) {
    throw new TypeError("defineTool: requiredGrants is not an array of grant names");
  }
  if (def.outputType !== undefined && typeof def.outputType !== "string") {
    throw new TypeError("defineTool: outputType is not a string");
  }
  if (def.log !== undefined && typeof def.log !== "function") throw new TypeError("defineTool: log is not a function");
  const signature = def.inputSignature;
  if (signature !== undefined) {
    if (!Array.isArray(signature)) throw new TypeError("defineTool: inputSignature is not an array");
    const seen = new Set();
    for (const p of signature) {
      if (!isObject(p) || typeof p.name !== "string" || p.name === "") {
        throw new TypeError("defineTool: each inputSignature entry needs a name");
      }
      // run receives its parameters and context in one object.
      if (p.name === "context") throw new TypeError('defineTool: a parameter cannot be named "context"');
      if (seen.has(p.name)) throw new TypeError(`defineTool: parameter ${p.name} is declared twice`);
      if (p.type_ref !== undefined && typeof p.type_ref !== "string") {
        throw new TypeError(`defineTool: type_ref of ${p.name} is not a string`);
      }
      if (p.optional !== undefined && typeof p.optional !== "boolean") {
        throw new TypeError(`defineTool: optional of ${p.name} is not a boolean`);
      }
      seen.add(p.name);
    }
  }
}

/**
 * Tool is a checked tool definition that answers requests. defineTool
 * serves one on stdin and stdout; createTool returns one for tests and
 * other hosts.
 */
export class Tool {
  constructor(definition) {
    checkDefinition(definition);
    this.toolRef = definition.toolRef;
    this.requiredGrants = Object.freeze([...(definition.requiredGrants ?? [])]);
    this.inputSignature = definition.inputSignature
      ? Object.freeze(definition.inputSignature.map((p) => Object.freeze({ ...p })))
      : null;
    this.outputType = definition.outputType ?? null;
    this._run = definition.run;
    this._log = definition.log ?? ((msg) => process.stderr.write(`${this.toolRef}: ${msg}\n`));
    Object.freeze(this);
  }

  /**
   * handleLine answers one request text with one response line (ending in
   * "\n"). It never throws, whatever the text holds. With persistent set
   * the response carries the request's call_id at the top level (SPEC §4.1).
   * signal, when given, is aborted when the host wants the process to stop.
   */
  async handleLine(text, { persistent = false, signal } = {}) {
    let doc;
    let resp;
    try {
      doc = JSON.parse(text);
    } catch (err) {
      resp = failure(Codes.ProtocolError, `request is not JSON: ${err.message}`);
    }
    if (resp === undefined) {
      try {
        resp = await this.answer(doc, signal);
      } catch (err) {
        // answer catches what run throws; this is the SDK's own failure.
        this._log(`internal error: ${err?.stack ?? err}`);
        resp = failure(Codes.Failed, "the handler failed");
      }
    }
    if (persistent) resp = { call_id: callIdOf(doc), ...resp };
    return encodeLine(resp);
  }

  /**
   * answer checks a parsed request document and runs the tool; it returns
   * the response object. idempotencyKey, when served over HTTP, is the
   * request's Idempotency-Key header (context.idempotency_key).
   */
  async answer(doc, signal, { idempotencyKey = null } = {}) {
    let req;
    try {
      req = parseRequest(doc);
    } catch (err) {
      if (err instanceof ProtocolError) return failure(Codes.ProtocolError, err.message);
      throw err;
    }
    const call = {}; // identity token: receipts are bound to it
    // The checks below refuse before run, so for an external write the SDK
    // knows the write did not happen and says so.
    const refusedReceipt = req.context.effect
      ? receiptFor(call, bindReceiptFactory(call, req.context.effect)({ outcome: "not_applied" })).wire
      : null;
    if (req.toolRef !== this.toolRef) {
      return withErrorReceipt(
        failure(Codes.ToolRefMismatch, `this handler implements ${this.toolRef}, not ${req.toolRef}`),
        refusedReceipt,
      );
    }
    const missing = this.requiredGrants.filter((g) => !req.context.grants.includes(g));
    if (missing.length > 0) {
      const resp = failure(Codes.GrantMissing, `the binding does not grant ${JSON.stringify(missing)}`);
      resp.error.details = { missing };
      return withErrorReceipt(resp, refusedReceipt);
    }
    const bad = this.checkInput(req.input);
    if (bad) return withErrorReceipt(failure(Codes.InputInvalid, bad), refusedReceipt);
    return this.run(call, req, signal, idempotencyKey);
  }

  /** checkInput returns why input does not match the inputSignature, or "". */
  checkInput(input) {
    if (!this.inputSignature) return "";
    if (!isObject(input)) return "input is not an object";
    const problems = [];
    for (const p of this.inputSignature) {
      const v = input[p.name];
      if (v === undefined || v === null) {
        if (!p.optional) problems.push(`${p.name} is missing`);
        continue;
      }
      const check = BUILTIN_TYPES[p.type_ref];
      if (check && !check(v)) problems.push(`${p.name} is not ${p.type_ref}`);
    }
    return problems.length ? `input does not match the signature of ${this.toolRef}: ${problems.join("; ")}` : "";
  }

  async run(call, req, hostSignal, idempotencyKey = null) {
    const { context: wc } = req;
    const signals = [hostSignal].filter(Boolean);
    let timer;
    if (wc.deadline_unix_ms > 0) {
      // A timer that keeps the process alive (unlike AbortSignal.timeout):
      // a run waiting only for its deadline must still get to answer.
      const deadline = new AbortController();
      timer = setTimeout(
        () => deadline.abort(new DOMException("the call's deadline passed", "TimeoutError")),
        Math.max(0, wc.deadline_unix_ms - Date.now()),
      );
      signals.push(deadline.signal);
    }
    try {
      return await this.runWith(call, req, signals, idempotencyKey);
    } finally {
      clearTimeout(timer);
    }
  }

  async runWith(call, req, signals, idempotencyKey) {
    const { context: wc } = req;
    const context = Object.freeze({
      ...wc,
      grants: Object.freeze([...wc.grants]),
      operation: req.operation,
      tool_ref: req.toolRef,
      input: req.input,
      deadline: wc.deadline_unix_ms > 0 ? new Date(wc.deadline_unix_ms) : null,
      signal: signals.length ? AbortSignal.any(signals) : new AbortController().signal,
      // The Idempotency-Key header over HTTP (checked to be effect.effect_id,
      // or call_id without an effect); null for a process handler.
      idempotency_key: idempotencyKey,
      // Absent without an effect, so a handler can test for it.
      createEffectReceipt: wc.effect ? bindReceiptFactory(call, wc.effect) : undefined,
    });
    const args = isObject(req.input) ? { ...req.input, context } : { context };
    let value;
    try {
      value = await this._run(args);
    } catch (err) {
      return this.errorResponse(call, context, err);
    }
    const result = value instanceof ToolResult ? value : new ToolResult(value, null);
    const receipt = this.receipt(call, context, result.effectReceipt);
    let output;
    try {
      output = encodeValue(result.output);
    } catch (err) {
      this._log(`call ${context.call_id}: encode output: ${err.message}`);
      // The write may still have happened: keep the handler's statement.
      return withErrorReceipt(failure(Codes.Failed, "the handler output cannot be encoded as JSON"), receipt);
    }
    const resp = { ok: true, output };
    if (receipt) resp.effect_receipt = receipt;
    return resp;
  }

  errorResponse(call, context, err) {
    const business = err instanceof ToubaHandlerError || (err?.name === "ToubaHandlerError" && "code" in err);
    if (!business) {
      // Its text may hold private data (a connection string, a query).
      this._log(`call ${context.call_id} failed: ${err?.stack ?? err}`);
      return failure(Codes.Failed, "the handler failed");
    }
    const code = typeof err.code === "string" && err.code !== "" ? err.code : Codes.Failed;
    const resp = failure(code, typeof err.message === "string" ? err.message : "");
    let receipt = null;
    if (isObject(err.details)) {
      for (const [key, v] of Object.entries(err.details)) {
        if (key === "effect_receipt") {
          receipt = this.receipt(call, context, v);
          continue;
        }
        try {
          const value = encodeValue(v);
          resp.error.details ??= {};
          resp.error.details[key] = value;
        } catch (e) {
          this._log(`call ${context.call_id}: detail ${key} dropped: ${e.message}`);
        }
      }
    } else if (err.details !== undefined && err.details !== null) {
      this._log(`call ${context.call_id}: details dropped: not an object`);
    }
    return withErrorReceipt(resp, receipt);
  }

  // receipt returns the wire form of r if it may be sent in the answer to
  // call. A receipt that is not the call's own is dropped: the host then
  // records the effect as unknown, which is the truth as far as it knows.
  receipt(call, context, r) {
    const { wire, reason } = receiptFor(call, r);
    if (reason) this._log(`call ${context.call_id}: receipt dropped: ${reason}`);
    return wire;
  }
}

/** createTool checks a definition and returns its Tool without serving it. */
export function createTool(definition) {
  return new Tool(definition);
}

function failure(code, message) {
  return { ok: false, error: { code, message } };
}

function withErrorReceipt(resp, receipt) {
  if (receipt) {
    resp.error.details ??= {};
    resp.error.details.effect_receipt = receipt;
  }
  return resp;
}

// encodeValue returns v as it will be sent (a JSON round trip), or throws
// when v has no JSON form (a BigInt, a cycle, a function).
function encodeValue(v) {
  if (v === undefined) return null;
  const text = JSON.stringify(v);
  if (text === undefined) throw new TypeError(`a ${typeof v} has no JSON form`);
  return JSON.parse(text);
}

function encodeLine(resp) {
  try {
    return JSON.stringify(resp) + "\n";
  } catch {
    const fallback = failure(Codes.Failed, "the response cannot be encoded");
    if ("call_id" in resp) return JSON.stringify({ call_id: resp.call_id, ...fallback }) + "\n";
    return JSON.stringify(fallback) + "\n";
  }
}
