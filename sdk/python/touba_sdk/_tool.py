"""A tool: its definition, the checks made before its run, and the turning
of whatever run does (result, ToubaHandlerError, any other exception) into
exactly one response."""

from __future__ import annotations

import asyncio
import inspect
import json
import sys
import threading
import traceback
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from . import _protocol as p
from ._result import EffectReceipt, ToolResult, ToubaHandlerError, create_effect_receipt, new_effect, receipt_for

# Type refs the SDK can check itself; any other type_ref (such as
# "type:examples.orders/CreateOrderInput") names a type the SDK does not
# know, so only the parameter's presence is checked.
_BUILTIN_TYPES: dict[str, Callable[[Any], bool]] = {
    "type:string": lambda v: isinstance(v, str),
    "type:number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "type:integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "type:boolean": lambda v: isinstance(v, bool),
    "type:object": lambda v: isinstance(v, dict),
    "type:array": lambda v: isinstance(v, list),
    "type:any": lambda v: True,
}


def _default_log(tool_ref: str) -> Callable[[str], None]:
    def log(message: str) -> None:
        sys.stderr.write(f"{tool_ref}: {message}\n")
        sys.stderr.flush()

    return log


def _check_signature(signature: Any) -> tuple:
    if not isinstance(signature, (list, tuple)):
        raise TypeError("define_tool: input_signature is not a list")
    seen = set()
    out = []
    for param in signature:
        if not isinstance(param, Mapping) or not isinstance(param.get("name"), str) or not param["name"]:
            raise TypeError("define_tool: each input_signature entry needs a name")
        name = param["name"]
        if name in seen:
            raise TypeError(f"define_tool: parameter {name} is declared twice")
        if param.get("type_ref") is not None and not isinstance(param["type_ref"], str):
            raise TypeError(f"define_tool: type_ref of {name} is not a string")
        if not isinstance(param.get("optional", False), bool):
            raise TypeError(f"define_tool: optional of {name} is not a bool")
        seen.add(name)
        out.append(MappingProxyType(dict(param)))
    return tuple(out)


class Tool:
    """A checked tool definition that answers requests. define_tool serves
    one on stdin and stdout; build one directly for tests and other hosts."""

    def __init__(self, tool_ref: str, run: Callable[..., Any], *, required_grants: list[str] | None = None,
                 input_signature: list[Mapping] | None = None, output_type: str | None = None,
                 log: Callable[[str], None] | None = None) -> None:
        if not isinstance(tool_ref, str) or not tool_ref:
            raise TypeError("define_tool: tool_ref is empty")
        if not callable(run):
            raise TypeError("define_tool: run is not callable")
        grants = list(required_grants or [])
        if not all(isinstance(g, str) and g for g in grants):
            raise TypeError("define_tool: required_grants is not a list of grant names")
        if output_type is not None and not isinstance(output_type, str):
            raise TypeError("define_tool: output_type is not a string")
        self.tool_ref = tool_ref
        self.required_grants = tuple(grants)
        self.input_signature = _check_signature(input_signature) if input_signature is not None else None
        self.output_type = output_type
        self._run = run
        self._log = log or _default_log(tool_ref)

    def handle_line(self, text: str | bytes, *, persistent: bool = False,
                    stop_event: threading.Event | None = None) -> bytes:
        """Answers one request text with one response line (ending in "\\n").
        It never raises, whatever the text holds. With persistent set the
        response carries the request's call_id at the top level (SPEC §4.1)."""
        doc = None
        try:
            if isinstance(text, bytes):
                text = text.decode("utf-8")
            doc = p.loads(text)
        except (ValueError, RecursionError) as err:  # bad UTF-8 or JSON, or nested past the parser's depth
            resp = _failure(p.CODE_PROTOCOL_ERROR, f"request is not JSON this handler can read: {type(err).__name__}")
        else:
            try:
                resp = self.answer(doc, stop_event)
            except Exception:  # the SDK's own failure: answer catches what run raises
                self._log(f"internal error: {traceback.format_exc()}")
                resp = _failure(p.CODE_FAILED, "the handler failed")
        if persistent:
            resp = {"call_id": p.call_id_of(doc), **resp}
        return _encode_line(resp)

    def answer(self, doc: Any, stop_event: threading.Event | None = None, *,
               idempotency_key: str | None = None) -> dict:
        """Checks a parsed request document and runs the tool; returns the
        response as a dict. idempotency_key, when served over HTTP, is the
        request's Idempotency-Key header (context["idempotency_key"])."""
        try:
            req = p.parse_request(doc)
        except p.ProtocolError as err:
            return _failure(p.CODE_PROTOCOL_ERROR, str(err))
        call = object()  # identity token: receipts are bound to it
        wc = req["context"]
        effect = new_effect(call, wc["effect"]) if wc["effect"] is not None else None
        # The checks below refuse before run, so for an external write the
        # SDK knows the write did not happen and says so.
        refused = receipt_for(call, create_effect_receipt(effect, outcome="not_applied"))[0] if effect else None
        if req["tool_ref"] != self.tool_ref:
            msg = f"this handler implements {self.tool_ref}, not {req['tool_ref']}"
            return _with_receipt(_failure(p.CODE_TOOL_REF_MISMATCH, msg), refused)
        missing = [g for g in self.required_grants if g not in wc["grants"]]
        if missing:
            resp = _failure(p.CODE_GRANT_MISSING, f"the binding does not grant {json.dumps(missing)}")
            resp["error"]["details"] = {"missing": missing}
            return _with_receipt(resp, refused)
        bad = self.check_input(req["input"])
        if bad:
            return _with_receipt(_failure(p.CODE_INPUT_INVALID, bad), refused)
        deadline = wc["deadline_unix_ms"] / 1000 if wc["deadline_unix_ms"] > 0 else None
        context = MappingProxyType({
            **wc,
            "grants": tuple(wc["grants"]),
            "effect": effect,
            "operation": req["operation"],
            "tool_ref": req["tool_ref"],
            "input": req["input"],
            "deadline": deadline,
            "stop_event": stop_event or threading.Event(),
            # The Idempotency-Key header over HTTP (checked to be the effect's
            # effect_id, or call_id without an effect); None for a process.
            "idempotency_key": idempotency_key,
        })
        return self._call(call, req["input"], context)

    def check_input(self, value: Any) -> str:
        """Returns why value does not match the input_signature, or ""."""
        if self.input_signature is None:
            return ""
        if not isinstance(value, dict):
            return "input is not an object"
        problems = []
        for param in self.input_signature:
            v = value.get(param["name"])
            if v is None:
                if not param.get("optional", False):
                    problems.append(f"{param['name']} is missing")
                continue
            check = _BUILTIN_TYPES.get(param.get("type_ref") or "")
            if check is not None and not check(v):
                problems.append(f"{param['name']} is not {param['type_ref']}")
        if problems:
            return f"input does not match the signature of {self.tool_ref}: {'; '.join(problems)}"
        return ""

    def _call(self, call: object, value: Any, context: Mapping) -> dict:
        try:
            result = self._run(value, context)
            if inspect.isawaitable(result):
                result = asyncio.run(_await(result))
        except ToubaHandlerError as err:
            return self._business_error(call, context, err)
        except BaseException as err:  # noqa: BLE001 - every failure of run is answered, sys.exit() too
            # Its text may hold private data (a connection string, a query).
            self._log(f"call {context['call_id']} failed: {''.join(traceback.format_exception(err))}")
            return _failure(p.CODE_FAILED, "the handler failed")
        if not isinstance(result, ToolResult):
            result = ToolResult(result)
        receipt = self._receipt(call, context, result.effect_receipt)
        try:
            output = _encode_value(result.output)
        except (TypeError, ValueError, RecursionError) as err:
            self._log(f"call {context['call_id']}: encode output: {err}")
            # The write may still have happened: keep the handler's statement.
            return _with_receipt(_failure(p.CODE_FAILED, "the handler output cannot be encoded as JSON"), receipt)
        resp = {"ok": True, "output": output}
        if receipt is not None:
            resp["effect_receipt"] = receipt
        return resp

    def _business_error(self, call: object, context: Mapping, err: ToubaHandlerError) -> dict:
        code = err.code if isinstance(err.code, str) and err.code else p.CODE_FAILED
        resp = _failure(code, err.message if isinstance(err.message, str) else "")
        receipt = None
        if isinstance(err.details, Mapping):
            for key, v in err.details.items():
                if key == "effect_receipt":
                    receipt = self._receipt(call, context, v)
                    continue
                try:
                    resp["error"].setdefault("details", {})[str(key)] = _encode_value(v)
                except (TypeError, ValueError, RecursionError) as e:
                    self._log(f"call {context['call_id']}: detail {key!r} dropped: {e}")
        elif err.details is not None:
            self._log(f"call {context['call_id']}: details dropped: not a mapping")
        return _with_receipt(resp, receipt)

    def _receipt(self, call: object, context: Mapping, r: Any) -> dict | None:
        # A receipt that is not the call's own is dropped: the host then
        # records the effect as unknown, which is the truth as far as it knows.
        wire, reason = receipt_for(call, r)
        if reason:
            self._log(f"call {context['call_id']}: receipt dropped: {reason}")
        return wire


async def _await(awaitable: Any) -> Any:
    return await awaitable


def _failure(code: str, message: str) -> dict:
    return {"ok": False, "error": {"code": code, "message": message}}


def _with_receipt(resp: dict, receipt: dict | None) -> dict:
    if receipt is not None:
        resp["error"].setdefault("details", {})["effect_receipt"] = receipt
    return resp


def _default(v: Any) -> Any:
    if isinstance(v, (Mapping, EffectReceipt)):
        return dict(v)
    if isinstance(v, (set, frozenset)):
        raise TypeError("a set has no JSON form")
    raise TypeError(f"a {type(v).__name__} has no JSON form")


def _dumps(v: Any) -> str:
    return json.dumps(v, ensure_ascii=False, separators=(",", ":"), allow_nan=False, default=_default)


def _encode_value(v: Any) -> Any:
    """Returns v as it will be sent (a JSON round trip), or raises when v has
    no JSON form (NaN, a set, an object)."""
    text = _dumps(v)
    text.encode("utf-8")  # a lone surrogate has no UTF-8 form: raises UnicodeEncodeError
    return json.loads(text)


def _encode_line(resp: dict) -> bytes:
    try:
        return (_dumps(resp) + "\n").encode("utf-8")
    except (TypeError, ValueError, RecursionError, UnicodeEncodeError):
        fallback = _failure(p.CODE_FAILED, "the response cannot be encoded")
        if "call_id" in resp:
            fallback = {"call_id": resp["call_id"], **fallback}
        return (_dumps(fallback) + "\n").encode("utf-8")
