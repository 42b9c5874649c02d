#!/usr/bin/env bash
# Sends BODY_FILE to the Stripe endpoint as a signed delivery, with curl;
# prints the daemon's answer and its HTTP status.
#   ./send.sh [BODY_FILE]     (default event.json)
# Environment: STRIPE_WEBHOOK_SECRET (required), TOUBA_URL (default http://127.0.0.1:8080).
set -euo pipefail
cd "$(dirname "$0")"
body=${1:-event.json}
url=${TOUBA_URL:-http://127.0.0.1:8080}/triggers/examples.stripe/Events
node sign.mjs "$body" | curl -sS -K - --data-binary @"$body" -w '  (HTTP %{http_code})\n' "$url"
