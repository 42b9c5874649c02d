// RecordEvent: books a Stripe event (an invoice paid, a charge refunded, a
// subscription deleted: each flow of the program calls it) into a local
// events file, the stand-in for your own database. Its binding is an
// external_write with retry_mode idempotency_key, which is true only because
// this handler keys each line by context.effect.effect_id and writes none
// twice: when the daemon repeats a call whose outcome it lost, the line
// written the first time is read back and answered again.
//
// The file is .touba/events.jsonl under the handler's cwd (this folder).

import { appendFileSync, mkdirSync, readFileSync } from "node:fs";
import { ToubaHandlerError, createToolResult, defineTool } from "@touba/sdk";

const file = ".touba/events.jsonl";

function booked(effectId) {
  let text;
  try {
    text = readFileSync(file, "utf8");
  } catch (err) {
    if (err.code === "ENOENT") return undefined;
    throw err;
  }
  for (const line of text.split("\n")) {
    if (!line) continue;
    const rec = JSON.parse(line);
    if (rec.effect_id === effectId) return rec;
  }
  return undefined;
}

await defineTool({
  toolRef: "tool:examples.stripe/RecordEvent",
  inputSignature: [{ name: "event", type_ref: "type:object" }],
  outputType: "type:examples.stripe/Booked",
  requiredGrants: ["filesystem"],
  run: async ({ event, context }) => {
    if (!context.effect || !context.createEffectReceipt) {
      throw new ToubaHandlerError("EffectContextRequired", "RecordEvent requires touba-tool-handler-v1");
    }
    const receipt = (outcome, ref) => context.createEffectReceipt({ outcome, receipt_ref: ref });
    const effectId = context.effect.effect_id;
    const earlier = booked(effectId);
    if (earlier) {
      return createToolResult(earlier, { effectReceipt: receipt("applied", `event:${earlier.event_id}`) });
    }
    const object = event?.data?.object ?? {};
    const rec = {
      effect_id: effectId,
      event_id: event.id,
      type: event.type,
      object: object.id ?? null,
      customer: object.customer ?? null,
      amount: object.amount_paid ?? object.amount_refunded ?? object.amount ?? null,
      currency: object.currency ?? null,
      order_id: object.metadata?.order_id ?? null,
    };
    try {
      mkdirSync(".touba", { recursive: true });
      appendFileSync(file, JSON.stringify(rec) + "\n");
    } catch (err) {
      // The line may or may not be on disk: unknown, and the daemon calls
      // again with the same effect id, which booked() then finds or not.
      throw new ToubaHandlerError("EventsFileUnavailable", `cannot write ${file}: ${err.message}`, {
        effect_receipt: receipt("unknown"),
      });
    }
    return createToolResult(rec, { effectReceipt: receipt("applied", `event:${rec.event_id}`) });
  },
});
