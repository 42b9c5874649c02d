// @touba/sdk: write touba-trigger process handlers that speak
// touba-tool-handler-v1 (SPEC §4), in one-shot or persistent mode (§4.1),
// over HTTP (§4.2), or as a worker that connects out to the daemon (§4.3).
//
//   import { ToubaHandlerError, createToolResult, defineTool } from "@touba/sdk";
//
//   await defineTool({
//     toolRef: "tool:examples.orders/CreateOrder",
//     inputSignature: [{ name: "request", type_ref: "type:examples.orders/CreateOrderInput" }],
//     requiredGrants: ["network"],
//     run: async ({ request, context }) => {
//       const order = await shop.create(request, { idempotencyKey: context.effect.effect_id });
//       return createToolResult(order, {
//         effectReceipt: context.createEffectReceipt({ outcome: "applied", receipt_ref: `order:${order.id}` }),
//       });
//     },
//   });

export { defineTool, serveOne, servePersistent } from "./serve.js";
export { DEFAULT_MAX_IN_FLIGHT, DEFAULT_TAKE_WAIT_MS, ToubaNoAnswer, ToubaWorkerRefusedError, connect } from "./connect.js";
export { Tool, createTool } from "./tool.js";
export { ToolResult, ToubaHandlerError, createToolResult } from "./result.js";
export { Codes, MODE_ENV, Outcomes, PROTOCOL } from "./protocol.js";
export {
  DEFAULT_MAX_BODY_BYTES,
  HttpCodes,
  IDEMPOTENCY_KEY_HEADER,
  PROTOCOL_HEADER,
  SECRET_ENV,
  SIGNATURE_HEADER,
  ToubaSignatureError,
  createHttpHandler,
  verifySignature,
} from "./http.js";
