// ReadOrder: looks up the order of a shop reference at the provider. It
// writes nothing, so its binding's contract is "none" and the daemon may run
// it again freely.

import { ToubaHandlerError, defineTool } from "@touba/sdk";
import { ordersApi } from "./orders-api.mjs";

await defineTool({
  toolRef: "tool:examples.orders/ReadOrder",
  inputSignature: [{ name: "order_id", type_ref: "type:string" }],
  outputType: "type:examples.orders/ReadOrderOutput",
  requiredGrants: ["network"],
  run: async ({ order_id: reference, context }) => {
    let res;
    try {
      res = await ordersApi("GET", `/orders?reference=${encodeURIComponent(reference)}`, { signal: context.signal });
    } catch (err) {
      if (err instanceof ToubaHandlerError) throw err;
      throw new ToubaHandlerError("OrdersApiUnavailable", "the orders service did not answer");
    }
    if (res.status !== 200 || !Array.isArray(res.body?.orders)) {
      throw new ToubaHandlerError("OrdersApiFailed", `the orders service answered ${res.status}`);
    }
    const order = res.body.orders[0] ?? null;
    return { found: order !== null, order };
  },
});
