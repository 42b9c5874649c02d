"""ShipOrder: asks the provider to ship the order CreateOrder made. An
external_write with retry_mode idempotency_key, like CreateOrder, and for the
same reason: the effect_id goes to the provider as its Idempotency-Key.

Written in Python with touba_sdk to show the same contract in both SDKs."""

import json
import os
import socket
import sys
import time
import urllib.error
import urllib.request

try:
    import touba_sdk  # noqa: F401 - installed with pip install ./sdk/python
except ImportError:
    # Run from a checkout: the daemon passes no PYTHONPATH, so find the SDK
    # in this repository.
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, os.path.join(here, "..", "..", "..", "sdk", "python"))

from touba_sdk import ToubaHandlerError, create_effect_receipt, create_tool_result, define_tool  # noqa: E402


def post(base, path, body, idempotency_key, deadline):
    """POSTs body to the provider; returns (status, parsed JSON or None)."""
    req = urllib.request.Request(base.rstrip("/") + path, data=json.dumps(body).encode(), method="POST")
    req.add_header("content-type", "application/json")
    req.add_header("idempotency-key", idempotency_key)
    if os.environ.get("ORDERS_API_TOKEN"):
        req.add_header("authorization", "Bearer " + os.environ["ORDERS_API_TOKEN"])
    timeout = max(0.1, deadline - time.time()) if deadline else 10
    try:
        with urllib.request.urlopen(req, timeout=timeout) as res:
            status, text = res.status, res.read()
    except urllib.error.HTTPError as err:
        status, text = err.code, err.read()
    try:
        return status, json.loads(text)
    except ValueError:
        return status, None


def not_sent(err):
    """Whether the request certainly never reached the provider."""
    reason = getattr(err, "reason", err)
    return isinstance(reason, (ConnectionRefusedError, socket.gaierror))


def run(value, context):
    effect = context["effect"]
    if effect is None:
        raise ToubaHandlerError("EffectContextRequired", "ShipOrder requires touba-tool-handler-v1")

    def receipt(outcome, ref=""):
        return create_effect_receipt(effect, {"outcome": outcome, "receipt_ref": ref})

    base = os.environ.get("ORDERS_API_URL")
    if not base:
        raise ToubaHandlerError("OrdersApiNotConfigured", "ORDERS_API_URL is not set for this binding",
                                {"effect_receipt": receipt("not_applied")})
    order = value["order"]
    try:
        status, body = post(base, "/shipments", {"order_id": order.get("id")}, effect["effect_id"], context["deadline"])
    except (urllib.error.URLError, OSError) as err:
        # Refused before sending: nothing happened. Anything else (a timeout,
        # a reset) may have reached the provider.
        outcome = "not_applied" if not_sent(err) else "unknown"
        raise ToubaHandlerError("OrdersApiUnavailable", "the orders service did not answer",
                                {"effect_receipt": receipt(outcome)}) from None
    if status in (200, 201):
        return create_tool_result(body, receipt("applied", f"shipment:{body['id']}"))
    if status in (400, 404, 422):
        message = (body or {}).get("message", str(status))
        raise ToubaHandlerError("ShipmentRejected", f"the orders service refused the shipment: {message}",
                                {"effect_receipt": receipt("not_applied")})
    if status in (401, 403):
        raise ToubaHandlerError("OrdersApiUnauthorized", "the orders service refused the token",
                                {"effect_receipt": receipt("not_applied")})
    if status == 409:
        raise ToubaHandlerError("ShipmentInProgress", "the shipment is still being made",
                                {"effect_receipt": receipt("unknown")})
    raise ToubaHandlerError("OrdersApiFailed", f"the orders service answered {status}",
                            {"effect_receipt": receipt("unknown")})


define_tool(
    tool_ref="tool:examples.orders/ShipOrder",
    input_signature=[{"name": "order", "type_ref": "type:object"}],
    output_type="type:examples.orders/Shipment",
    required_grants=["network"],
    run=run,
)
