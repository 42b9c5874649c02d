#!/usr/bin/env bash
# Sends a storm of signed Shopify products/update webhooks for one product,
# as Shopify does while an editor changes its fields: COUNT deliveries, each
# with its own X-Shopify-Webhook-Id and a new title; prints each answer.
#   ./send.sh [PRODUCT_ID] [COUNT]     (default 788032119674292922 and 5)
# Environment: SHOPIFY_WEBHOOK_SECRET (required), TOUBA_URL (default
# http://127.0.0.1:8080). Needs curl, openssl and base64.
set -euo pipefail
id=${1:-788032119674292922}
count=${2:-5}
url=${TOUBA_URL:-http://127.0.0.1:8080}/triggers/examples.shopify/ProductsUpdate
: "${SHOPIFY_WEBHOOK_SECRET:?set SHOPIFY_WEBHOOK_SECRET to the app's client secret}"
for n in $(seq 1 "$count"); do
  body=$(printf '{"id":%s,"title":"Example T-Shirt (edit %d)","updated_at":"%s","variants":[{"id":642667041472713922,"price":"19.%02d"}]}' \
    "$id" "$n" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$n")
  hmac=$(printf '%s' "$body" | openssl dgst -sha256 -hmac "$SHOPIFY_WEBHOOK_SECRET" -binary | base64)
  curl -sS "$url" -H 'Content-Type: application/json' \
    -H "X-Shopify-Topic: products/update" -H "X-Shopify-Shop-Domain: example.myshopify.com" \
    -H "X-Shopify-API-Version: 2025-01" -H "X-Shopify-Webhook-Id: $(cat /proc/sys/kernel/random/uuid)" \
    -H "X-Shopify-Hmac-Sha256: $hmac" --data-binary "$body" -w '  (HTTP %{http_code})\n'
done
