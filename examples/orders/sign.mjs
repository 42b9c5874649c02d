// Signs a webhook body the way a Standard Webhooks sender does, and prints
// the three headers as a curl config, so curl sends the request itself:
//
//   node sign.mjs MSG_ID order.json | curl -K - --data-binary @order.json \
//     http://127.0.0.1:8080/triggers/examples.orders/OrderWebhook
//
// The signature is "v1," + base64(HMAC-SHA256(key, "<id>.<timestamp>.<body>"))
// where key is the base64 after "whsec_" in ORDERS_WEBHOOK_SECRET (the same
// secret the program's verify block reads). MSG_ID is the delivery's
// identity: send the same id and body again and the daemon knows it.
// TIMESTAMP (Unix seconds) overrides the current time, to try the tolerance.

import { createHmac } from "node:crypto";
import { readFileSync } from "node:fs";

const [id, file] = process.argv.slice(2);
if (!id || !file) {
  process.stderr.write("usage: node sign.mjs MSG_ID BODY_FILE | curl -K - --data-binary @BODY_FILE URL\n");
  process.exit(2);
}
if (!/^[\x21-\x7e]{1,200}$/.test(id) || id.includes('"') || id.includes("\\")) {
  process.stderr.write("sign.mjs: MSG_ID must be 1-200 printable ASCII characters without quotes or backslashes\n");
  process.exit(2);
}
const secret = process.env.ORDERS_WEBHOOK_SECRET ?? "";
if (!secret.startsWith("whsec_")) {
  process.stderr.write("sign.mjs: set ORDERS_WEBHOOK_SECRET to the whsec_... secret of the program\n");
  process.exit(2);
}
const key = Buffer.from(secret.slice("whsec_".length), "base64");
const body = readFileSync(file);
const timestamp = process.env.TIMESTAMP ?? String(Math.floor(Date.now() / 1000));
const mac = createHmac("sha256", key);
mac.update(`${id}.${timestamp}.`);
mac.update(body);
const signature = `v1,${mac.digest("base64")}`;

process.stdout.write(
  [
    `header = "webhook-id: ${id}"`,
    `header = "webhook-timestamp: ${timestamp}"`,
    `header = "webhook-signature: ${signature}"`,
    `header = "content-type: application/json"`,
    "",
  ].join("\n"),
);
