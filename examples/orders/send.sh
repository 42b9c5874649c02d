#!/usr/bin/env bash
# Sends BODY_FILE to the orders trigger as a signed Standard Webhooks
# delivery with id MSG_ID, with curl; prints the daemon's answer and status.
#   ./send.sh MSG_ID [BODY_FILE]     (default order.json)
# Environment: ORDERS_WEBHOOK_SECRET (required), TOUBA_URL (default http://127.0.0.1:8080).
set -euo pipefail
cd "$(dirname "$0")"
id=${1:?usage: ./send.sh MSG_ID [BODY_FILE]}
body=${2:-order.json}
url=${TOUBA_URL:-http://127.0.0.1:8080}/triggers/examples.orders/OrderWebhook
node sign.mjs "$id" "$body" | curl -sS -K - --data-binary @"$body" -w '  (HTTP %{http_code})\n' "$url"
