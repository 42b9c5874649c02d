// CreateOrder: creates the order at the provider. Its binding is an
// external_write with retry_mode idempotency_key, which is true only because
// this handler really sends context.effect.effect_id as the provider's
// Idempotency-Key: when the daemon repeats a call whose outcome it lost, the
// provider answers the first order again instead of making a second one.

import { ToubaHandlerError, createToolResult, defineTool } from "@touba/sdk";
import { NotSent, ordersApi } from "./orders-api.mjs";

await defineTool({
  toolRef: "tool:examples.orders/CreateOrder",
  inputSignature: [
    { name: "request", type_ref: "type:examples.orders/CreateOrderInput" },
    { name: "existing", type_ref: "type:examples.orders/ReadOrderOutput", optional: true },
  ],
  outputType: "type:examples.orders/Order",
  requiredGrants: ["network"],
  run: async ({ request, existing, context }) => {
    if (!context.effect || !context.createEffectReceipt) {
      throw new ToubaHandlerError("EffectContextRequired", "CreateOrder requires touba-tool-handler-v1");
    }
    const receipt = (outcome, ref) => context.createEffectReceipt({ outcome, receipt_ref: ref });
    if (existing?.order) {
      // An earlier delivery (another event id) made the order this effect
      // stands for; making another would be the duplicate we are avoiding.
      return createToolResult(existing.order, { effectReceipt: receipt("applied", `order:${existing.order.id}`) });
    }

    let res;
    try {
      res = await ordersApi("POST", "/orders", {
        body: { reference: request.order_id, item: request.item, quantity: request.quantity },
        idempotencyKey: context.effect.effect_id,
        signal: context.signal,
      });
    } catch (err) {
      if (err instanceof ToubaHandlerError) {
        // Not configured: nothing was sent.
        throw new ToubaHandlerError(err.code, err.message, { effect_receipt: receipt("not_applied") });
      }
      // Refused before sending: nothing happened. Anything else may have
      // reached the provider: say unknown, and the daemon retries with the
      // same key.
      const outcome = err instanceof NotSent ? "not_applied" : "unknown";
      throw new ToubaHandlerError("OrdersApiUnavailable", "the orders service did not answer", {
        effect_receipt: receipt(outcome),
      });
    }

    switch (res.status) {
      case 200:
      case 201:
        return createToolResult(res.body, { effectReceipt: receipt("applied", `order:${res.body.id}`) });
      case 400:
      case 422:
        throw new ToubaHandlerError("OrderRejected", `the orders service refused the order: ${res.body?.message ?? res.status}`, {
          effect_receipt: receipt("not_applied"),
        });
      case 401:
      case 403:
        throw new ToubaHandlerError("OrdersApiUnauthorized", "the orders service refused the token", {
          effect_receipt: receipt("not_applied"),
        });
      case 409:
        // The first request with this key is still running there.
        throw new ToubaHandlerError("OrderInProgress", "the order is still being created", {
          effect_receipt: receipt("unknown"),
        });
      default:
        throw new ToubaHandlerError("OrdersApiFailed", `the orders service answered ${res.status}`, {
          effect_receipt: receipt("unknown"),
        });
    }
  },
});
