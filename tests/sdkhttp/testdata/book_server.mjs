// A webhook target on @touba/sdk for tests/sdkhttp: the tool Book, served
// by createHttpHandler on POST /hook, with GET /stats counting its runs.
// It listens on 127.0.0.1 port 0 and prints {"port": N} as its first line.
// The secret comes from TOUBA_WEBHOOK_SECRET.

import { createServer } from "node:http";
import { createHttpHandler, createTool, createToolResult } from "../../../sdk/js/src/index.js";

const stats = { runs: 0, applied: 0 };
const booked = new Map(); // effect_id -> booking number: the tool's own dedupe

const book = createTool({
  toolRef: "tool:sdkhttp/Book",
  run: async ({ invoice, context }) => {
    stats.runs++;
    const id = context.effect.effect_id;
    if (!booked.has(id)) {
      booked.set(id, booked.size + 1);
      stats.applied++;
    }
    const n = booked.get(id);
    return createToolResult(
      { booking: n, invoice, idempotency_key: context.idempotency_key, sdk: "js" },
      { effectReceipt: context.createEffectReceipt({ outcome: "applied", receipt_ref: `booking:${n}` }) },
    );
  },
});

const hook = createHttpHandler(book);
const server = createServer((req, res) => {
  if (req.url === "/stats") {
    res.setHeader("content-type", "application/json");
    res.end(JSON.stringify(stats));
    return;
  }
  hook(req, res);
});
server.listen(0, "127.0.0.1", () => {
  process.stdout.write(JSON.stringify({ port: server.address().port }) + "\n");
});
process.on("SIGTERM", () => server.close(() => process.exit(0)));
