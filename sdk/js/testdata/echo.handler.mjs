// A handler for the SDK's child-process tests: it echoes its input, and
// can be asked to linger (leave a timer running) or to wait for a signal.

import { ToubaHandlerError, createToolResult, defineTool } from "../src/index.js";

await defineTool({
  toolRef: "tool:test/Echo",
  requiredGrants: ["network"],
  run: async ({ context, ...input }) => {
    if (input.linger) setInterval(() => {}, 1000); // would keep a naive process alive
    if (input.fail) throw new ToubaHandlerError(input.fail, "asked to fail");
    if (input.wait_for_abort) {
      process.stderr.write("waiting\n");
      await new Promise((resolve) => context.signal.addEventListener("abort", resolve, { once: true }));
    }
    return createToolResult(
      { echo: input, mode: process.env.TOUBA_HANDLER_MODE ?? "one-shot", pid: process.pid },
      { effectReceipt: context.createEffectReceipt?.({ outcome: "applied", receipt_ref: `echo:${context.call_id}` }) },
    );
  },
});
