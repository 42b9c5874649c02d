// The small Node.js handler of scripts/bench-dispatch, on the repository's
// JavaScript SDK: it answers every call at once with its input as output
// and, for an external write, an applied receipt. One file serves both
// modes of SPEC §4.1.

import { createToolResult, defineTool } from "../../../sdk/js/src/index.js";

await defineTool({
  toolRef: "tool:bench/Write",
  run: async ({ context }) =>
    createToolResult(context.input, {
      effectReceipt: context.createEffectReceipt?.({ outcome: "applied", receipt_ref: `bench:${context.call_id}` }),
    }),
});
