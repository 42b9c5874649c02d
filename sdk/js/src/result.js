// What a tool's run gives back: a result with an optional effect receipt,
// or a ToubaHandlerError. Receipts are bound to the call that made them.

import { Outcomes } from "./protocol.js";

// Every receipt the SDK made, mapped to the call it belongs to. A receipt
// that is not in here, or belongs to another call, is never sent: a
// handler cannot vouch for another effect identity or fingerprint.
const owners = new WeakMap();

/**
 * bindReceiptFactory returns context.createEffectReceipt for one call's
 * effect. The receipt carries that effect's effect_id and fingerprint;
 * the caller chooses only the outcome and the receipt_ref.
 */
export function bindReceiptFactory(call, effect) {
  return function createEffectReceipt(options) {
    if (typeof options !== "object" || options === null) {
      throw new TypeError("createEffectReceipt: want { outcome, receipt_ref? }");
    }
    for (const key of Object.keys(options)) {
      if (key !== "outcome" && key !== "receipt_ref") {
        // effect_id and fingerprint above all: they come from the request.
        throw new TypeError(`createEffectReceipt: unknown field ${JSON.stringify(key)} (want outcome, receipt_ref)`);
      }
    }
    const { outcome, receipt_ref: ref } = options;
    if (!Outcomes.includes(outcome)) {
      throw new TypeError(`createEffectReceipt: outcome ${JSON.stringify(outcome)} is not ${Outcomes.join(", ")}`);
    }
    if (ref !== undefined && typeof ref !== "string") {
      throw new TypeError("createEffectReceipt: receipt_ref is not a string");
    }
    const receipt = { effect_id: effect.effect_id, fingerprint: effect.fingerprint, outcome };
    if (ref !== undefined && ref !== "") receipt.receipt_ref = ref;
    Object.freeze(receipt);
    owners.set(receipt, call);
    return receipt;
  };
}

/**
 * receiptFor returns receipt in its wire form if it may be sent in the
 * answer to call, or a reason it must not be. An absent receipt is simply
 * absent (reason "").
 */
export function receiptFor(call, receipt) {
  if (receipt === undefined || receipt === null) return { wire: null, reason: "" };
  const owner = typeof receipt === "object" ? owners.get(receipt) : undefined;
  if (owner === undefined) return { wire: null, reason: "receipt not made by context.createEffectReceipt" };
  if (owner !== call) return { wire: null, reason: "receipt made by another call" };
  return { wire: { ...receipt }, reason: "" };
}

/** ToolResult is a tool's successful answer: its output and, for an external write, the receipt. */
export class ToolResult {
  constructor(output, effectReceipt) {
    this.output = output;
    this.effectReceipt = effectReceipt ?? null;
    Object.freeze(this);
  }
}

/**
 * createToolResult returns the answer of a successful call: output (any
 * JSON value) and, for an external write, the receipt made by
 * context.createEffectReceipt. A run may also return a plain value, which
 * is the output with no receipt.
 */
export function createToolResult(output, { effectReceipt } = {}) {
  return new ToolResult(output, effectReceipt);
}

/**
 * ToubaHandlerError is a business error with a public code. The host keeps
 * the code as the call's error even when the receipt is missing, so choose
 * codes a caller can act on ("ExternalWriteRefused"). The message is public
 * too: describe the problem without connection strings, queries or private
 * data. details is optional JSON; its key effect_receipt may only hold a
 * receipt made by context.createEffectReceipt for this call, which tells
 * the host what became of the effect (not_applied after a confirmed
 * rollback; unknown when the write may have happened).
 */
export class ToubaHandlerError extends Error {
  constructor(code, message, details) {
    super(message);
    this.name = "ToubaHandlerError";
    this.code = code;
    this.details = details;
  }
}
