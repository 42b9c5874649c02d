"""touba_sdk: write touba-trigger process handlers in Python (standard
library only) that speak touba-tool-handler-v1 (SPEC §4), in one-shot or
persistent mode (§4.1), over HTTP as a WSGI application (§4.2), or as a
worker that connects out to the daemon (§4.3, connect).

    from touba_sdk import ToubaHandlerError, create_effect_receipt, create_tool_result, define_tool

    def run(input, context):
        effect = context["effect"]
        order = shop.create(input["request"], idempotency_key=effect["effect_id"])
        return create_tool_result(order, create_effect_receipt(
            effect, {"outcome": "applied", "receipt_ref": f"order:{order['id']}"}))

    define_tool(tool_ref="tool:examples.orders/CreateOrder", required_grants=["network"], run=run)

In persistent mode each call runs in its own thread, so run must be safe to
call concurrently.
"""

from ._protocol import (
    CODE_FAILED,
    CODE_GRANT_MISSING,
    CODE_INPUT_INVALID,
    CODE_PROTOCOL_ERROR,
    CODE_TOOL_REF_MISMATCH,
    MODE_ENV,
    OUTCOMES,
    PROTOCOL,
)
from ._http import (
    CODE_LENGTH_REQUIRED,
    CODE_METHOD_NOT_ALLOWED,
    CODE_PAYLOAD_TOO_LARGE,
    CODE_SIGNATURE_INVALID,
    DEFAULT_MAX_BODY_BYTES,
    PROTOCOL_HEADER,
    SECRET_ENV,
    ToubaSignatureError,
    verify_signature,
    wsgi_app,
)
from ._connect import DEFAULT_MAX_IN_FLIGHT, DEFAULT_TAKE_WAIT, NoAnswer, Worker, WorkerRefusedError, connect
from ._result import Effect, EffectReceipt, ToolResult, ToubaHandlerError, create_effect_receipt, create_tool_result
from ._serve import define_tool, serve_one, serve_persistent
from ._tool import Tool

__all__ = [
    "CODE_FAILED",
    "CODE_GRANT_MISSING",
    "CODE_LENGTH_REQUIRED",
    "CODE_METHOD_NOT_ALLOWED",
    "CODE_PAYLOAD_TOO_LARGE",
    "CODE_SIGNATURE_INVALID",
    "CODE_INPUT_INVALID",
    "CODE_PROTOCOL_ERROR",
    "CODE_TOOL_REF_MISMATCH",
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_MAX_IN_FLIGHT",
    "DEFAULT_TAKE_WAIT",
    "MODE_ENV",
    "NoAnswer",
    "OUTCOMES",
    "PROTOCOL",
    "PROTOCOL_HEADER",
    "SECRET_ENV",
    "Effect",
    "EffectReceipt",
    "Tool",
    "ToolResult",
    "ToubaHandlerError",
    "ToubaSignatureError",
    "Worker",
    "WorkerRefusedError",
    "connect",
    "create_effect_receipt",
    "create_tool_result",
    "define_tool",
    "serve_one",
    "serve_persistent",
    "verify_signature",
    "wsgi_app",
]
