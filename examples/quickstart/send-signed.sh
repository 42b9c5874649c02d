#!/usr/bin/env bash
# Sends BODY to the quick start's examples.billing/SignedInvoice trigger as a
# Standard Webhooks delivery with id MSG_ID, signed with the development key
# in dev-webhook-secret (never use it for anything real); prints the answer.
#   ./send-signed.sh MSG_ID ['{"amount": 10}']
# Needs bash, openssl, base64 (coreutils), od and curl. Environment:
# TOUBA_URL (default http://127.0.0.1:8080), TIMESTAMP (Unix seconds;
# default now), WEBHOOK_SECRET (default: the contents of dev-webhook-secret).
#
# The signature is "v1," + base64(HMAC-SHA256(key, "<id>.<timestamp>.<body>")),
# where key is the base64 after "whsec_" in the secret, decoded.
set -euo pipefail
cd "$(dirname "$0")"
id=${1:?usage: ./send-signed.sh MSG_ID [BODY]}
body=${2:-'{"amount": 10}'}
secret=${WEBHOOK_SECRET:-$(cat dev-webhook-secret)}
ts=${TIMESTAMP:-$(date +%s)}
key=$(printf '%s' "${secret#whsec_}" | base64 -d | od -An -v -tx1 | tr -d ' \n')
sig=$(printf '%s.%s.%s' "$id" "$ts" "$body" | openssl dgst -sha256 -mac HMAC -macopt "hexkey:$key" -binary | base64)
curl -sS -XPOST "${TOUBA_URL:-http://127.0.0.1:8080}/triggers/examples.billing/SignedInvoice" \
  -H "webhook-id: $id" -H "webhook-timestamp: $ts" -H "webhook-signature: v1,$sig" \
  -H 'content-type: application/json' --data-binary "$body" -w '  (HTTP %{http_code})\n'
