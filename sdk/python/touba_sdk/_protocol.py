"""The wire side of touba-tool-handler-v1 (SPEC §4): constants, the error
codes the SDK answers with on its own, and the check of a request document
before any user code sees it."""

from __future__ import annotations

import json
from typing import Any

PROTOCOL = "touba-tool-handler-v1"
"""The only handler protocol this SDK speaks."""

MODE_ENV = "TOUBA_HANDLER_MODE"
"""The environment variable the host sets to "persistent" (SPEC §4.1)."""

CODE_PROTOCOL_ERROR = "HandlerProtocolError"
"""The request is not a well-formed touba-tool-handler-v1 request."""
CODE_TOOL_REF_MISMATCH = "ToolRefMismatch"
"""The request names another tool than this one."""
CODE_GRANT_MISSING = "GrantMissing"
"""context.grants lacks one of the tool's required_grants; run is not called."""
CODE_INPUT_INVALID = "ToolInputInvalid"
"""The input does not match the tool's input_signature; run is not called."""
CODE_FAILED = "HandlerFailed"
"""run raised something other than a ToubaHandlerError, or its output has no JSON form."""

OUTCOMES = ("applied", "not_applied", "unknown")
"""The outcomes an effect receipt may state."""

_OPERATIONS = ("invoke", "compensate")


class ProtocolError(Exception):
    """A request that cannot be served; its text names fields, never values."""


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def loads(text: str) -> Any:
    """json.loads without NaN and Infinity, which are not JSON."""
    return json.loads(text, parse_constant=_reject_constant)


def call_id_of(doc: Any) -> str:
    """Returns context.call_id of a parsed document, or "" when there is none,
    so that even a malformed request is answered under its call_id."""
    if isinstance(doc, dict) and isinstance(doc.get("context"), dict):
        cid = doc["context"].get("call_id")
        if isinstance(cid, str):
            return cid
    return ""


def _is(value: Any, kind: str) -> bool:
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "string":
        return isinstance(value, str)
    if kind == "array":
        return isinstance(value, list)
    return False


def _field(obj: dict, name: str, kind: str, where: str, default: Any) -> Any:
    value = obj.get(name)
    if value is None:
        return default
    if not _is(value, kind):
        article = "an" if kind[0] in "aeiou" else "a"
        raise ProtocolError(f"{where}{name} is not {article} {kind}")
    return value


def parse_request(doc: Any) -> dict:
    """Checks a parsed request document and returns it with defaults filled
    in (context.effect is a plain dict or None). Raises ProtocolError when the
    document is not a touba-tool-handler-v1 request."""
    if not isinstance(doc, dict):
        raise ProtocolError(f"request is not a JSON object of {PROTOCOL}")
    if doc.get("protocol") != PROTOCOL:
        raise ProtocolError(f"protocol {json.dumps(str(doc.get('protocol') or ''))} is not {PROTOCOL}")
    if doc.get("operation") not in _OPERATIONS:
        raise ProtocolError(f"operation {json.dumps(str(doc.get('operation') or ''))} is not invoke or compensate")
    tool_ref = _field(doc, "tool_ref", "string", "", "")
    c = doc.get("context")
    if c is None:
        c = {}
    if not isinstance(c, dict):
        raise ProtocolError("context is not an object")
    context = {
        "trigger_ref": _field(c, "trigger_ref", "string", "context.", ""),
        "event_id": _field(c, "event_id", "string", "context.", ""),
        "queue_id": _field(c, "queue_id", "string", "context.", ""),
        "run_id": _field(c, "run_id", "string", "context.", ""),
        "call_id": _field(c, "call_id", "string", "context.", ""),
        "attempt": _field(c, "attempt", "integer", "context.", 0),
        "deadline_unix_ms": _field(c, "deadline_unix_ms", "integer", "context.", 0),
        "grants": _field(c, "grants", "array", "context.", []),
        # W3C trace context of the host's handler-call span; "" when the host
        # does not trace. Pass it on to join the delivery's trace.
        "traceparent": _field(c, "traceparent", "string", "context.", ""),
        "effect": None,
    }
    if not all(isinstance(g, str) for g in context["grants"]):
        raise ProtocolError("context.grants is not an array of strings")
    e = c.get("effect")
    if e is not None:
        if not isinstance(e, dict):
            raise ProtocolError("context.effect is not an object")
        effect = {
            "scope": _field(e, "scope", "string", "context.effect.", ""),
            "effect_id": _field(e, "effect_id", "string", "context.effect.", ""),
            "fingerprint": _field(e, "fingerprint", "string", "context.effect.", ""),
            "retry_mode": _field(e, "retry_mode", "string", "context.effect.", ""),
            "attempt": _field(e, "attempt", "integer", "context.effect.", 0),
        }
        if not effect["effect_id"] or not effect["fingerprint"]:
            raise ProtocolError("context.effect lacks effect_id or fingerprint")
        context["effect"] = effect
    return {
        "operation": doc["operation"],
        "tool_ref": tool_ref,
        "input": doc.get("input"),
        "context": context,
    }
