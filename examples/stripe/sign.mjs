// Signs a webhook body the way Stripe does, and prints the headers as a curl
// config, so curl sends the request itself:
//
//   node sign.mjs event.json | curl -K - --data-binary @event.json \
//     http://127.0.0.1:8080/triggers/examples.stripe/Events
//
// Stripe-Signature is "t=<unix seconds>,v1=<hex HMAC-SHA256>", the HMAC keyed
// with the endpoint's signing secret (STRIPE_WEBHOOK_SECRET, "whsec_...", used
// as it is, not base64-decoded) over "<t>.<raw body>". TIMESTAMP (Unix
// seconds) overrides the current time, to try the tolerance (300 s).
// The event's identity is its "id" field: the body itself carries it.

import { createHmac } from "node:crypto";
import { readFileSync } from "node:fs";

const [file] = process.argv.slice(2);
if (!file) {
  process.stderr.write("usage: node sign.mjs BODY_FILE | curl -K - --data-binary @BODY_FILE URL\n");
  process.exit(2);
}
const secret = process.env.STRIPE_WEBHOOK_SECRET ?? "";
if (!secret) {
  process.stderr.write("sign.mjs: set STRIPE_WEBHOOK_SECRET to the program's signing secret (whsec_...)\n");
  process.exit(2);
}
const body = readFileSync(file);
const t = process.env.TIMESTAMP ?? String(Math.floor(Date.now() / 1000));
const mac = createHmac("sha256", secret);
mac.update(`${t}.`);
mac.update(body);

process.stdout.write(
  [`header = "Stripe-Signature: t=${t},v1=${mac.digest("hex")}"`, `header = "Content-Type: application/json"`, ""].join("\n"),
);
