// Package verify checks the signatures of inbound webhooks (GitHub, Stripe,
// Standard Webhooks, Slack, Shopify, generic HMAC) and signs outbound ones.
// Every scheme goes through one HMAC-SHA256 code path and compares in
// constant time. It does no I/O: callers hand it headers, body and the
// arrival time.
//
// The schemes (source.verify.scheme, SPEC §2.1) and what each reads:
//
//	hmac-sha256        <header>: <prefix><HMAC(body) in encoding>
//	                   header (default X-Signature), encoding (hex, the
//	                   default, or base64) and prefix (default "sha256=",
//	                   "" for none) are the scheme's options
//	github             X-Hub-Signature-256: sha256=<hex HMAC(body)>
//	stripe             Stripe-Signature: t=<unix>,v1=<hex HMAC(t.body)>...
//	standard-webhooks  webhook-id, webhook-timestamp, webhook-signature:
//	                   v1,<base64 HMAC(id.timestamp.body)>..., key whsec_<base64>
//	slack              X-Slack-Request-Timestamp, X-Slack-Signature:
//	                   v0=<hex HMAC(v0:timestamp:body)>
//	shopify            X-Shopify-Hmac-Sha256: <base64 HMAC(body)>
//
// Only hmac-sha256 takes header, encoding and prefix; New refuses them for
// the other schemes, whose formats are fixed. Hex digits are read in either
// case (some senders print uppercase); the prefix is matched exactly, case
// included. Base64 is the standard alphabet with padding, in its canonical
// spelling only (no URL-safe alphabet, no missing padding): Shopify and the
// other body-signing base64 senders known to us send exactly that. stripe,
// standard-webhooks and slack sign a timestamp and reject one outside the
// tolerance; the others sign the body alone and cannot tell a replay, which
// the event id's deduplication stops instead.
package verify
