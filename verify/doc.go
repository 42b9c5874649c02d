// Package verify checks the signatures of inbound webhooks (GitHub, Stripe,
// Standard Webhooks, Slack, generic HMAC) and signs outbound ones. Every
// scheme goes through one HMAC-SHA256 code path and compares in constant
// time. It does no I/O: callers hand it headers, body and the arrival time.
package verify
