"""What a tool's run gives back: a result with an optional effect receipt,
or a ToubaHandlerError. Receipts are bound to the call that made them."""

from __future__ import annotations

from types import MappingProxyType

from collections.abc import Iterator, Mapping
from typing import Any

from ._protocol import OUTCOMES

# Only the SDK holds this, so only the SDK makes Effect objects.
_ISSUER = object()


class _ReadOnly(Mapping):
    """A read-only mapping of a few string keys."""

    __slots__ = ("_data",)

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is read-only")

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._data!r})"


class Effect(_ReadOnly):
    """context["effect"]: the identity of the call's external write, read-only.
    Send effect["effect_id"] to the remote service as its idempotency key.
    Only the SDK makes these; create_effect_receipt accepts nothing else."""

    __slots__ = ("_call",)

    def __init__(self, issuer: object, call: object, data: dict) -> None:
        if issuer is not _ISSUER:
            raise TypeError("Effect objects are made by the SDK; use context['effect']")
        object.__setattr__(self, "_data", MappingProxyType(dict(data)))
        object.__setattr__(self, "_call", call)


class EffectReceipt(_ReadOnly):
    """A handler's statement about one external write, bound to the effect_id
    and fingerprint of the call that made it. Read-only; made only by
    create_effect_receipt."""

    __slots__ = ("_call",)

    def __init__(self, issuer: object, call: object, data: dict) -> None:
        if issuer is not _ISSUER:
            raise TypeError("receipts are made by create_effect_receipt")
        object.__setattr__(self, "_data", MappingProxyType(dict(data)))
        object.__setattr__(self, "_call", call)


def new_effect(call: object, data: dict) -> Effect:
    """The SDK's way to make context["effect"] for one call."""
    return Effect(_ISSUER, call, data)


def create_effect_receipt(effect: Effect, fields: Mapping | None = None, /, **kwargs: Any) -> EffectReceipt:
    """Returns a receipt for effect (context["effect"] of the call) with the
    given outcome ("applied", "not_applied" or "unknown") and optional
    receipt_ref, as a mapping or keywords:

        create_effect_receipt(context["effect"], {"outcome": "not_applied"})
        create_effect_receipt(context["effect"], outcome="applied", receipt_ref="order:42")

    The receipt carries the effect's effect_id and fingerprint; no other
    field may be given. The SDK sends it only in the answer to the call the
    effect belongs to. It does not make the remote write idempotent: it only
    ties the outcome to the right identity. State "unknown" whenever the
    write may have happened."""
    if type(effect) is not Effect:
        raise TypeError("create_effect_receipt: effect is not context['effect'] of a call")
    merged = dict(fields or {})
    merged.update(kwargs)
    for key in merged:
        if key not in ("outcome", "receipt_ref"):
            # effect_id and fingerprint above all: they come from the request.
            raise TypeError(f"create_effect_receipt: unknown field {key!r} (want outcome, receipt_ref)")
    outcome = merged.get("outcome")
    if outcome not in OUTCOMES:
        raise ValueError(f"create_effect_receipt: outcome {outcome!r} is not one of {', '.join(OUTCOMES)}")
    ref = merged.get("receipt_ref")
    if ref is not None and not isinstance(ref, str):
        raise TypeError("create_effect_receipt: receipt_ref is not a string")
    data = {"effect_id": effect["effect_id"], "fingerprint": effect["fingerprint"], "outcome": outcome}
    if ref:
        data["receipt_ref"] = ref
    return EffectReceipt(_ISSUER, effect._call, data)


def receipt_for(call: object, receipt: Any) -> tuple[dict | None, str]:
    """Returns receipt in its wire form if it may be sent in the answer to
    call, else None and the reason. An absent receipt is simply absent."""
    if receipt is None:
        return None, ""
    if type(receipt) is not EffectReceipt:
        return None, "receipt not made by create_effect_receipt"
    if receipt._call is not call:
        return None, "receipt made by another call"
    return dict(receipt), ""


class ToolResult:
    """A tool's successful answer: its output and, for an external write,
    the receipt of the effect."""

    __slots__ = ("output", "effect_receipt")

    def __init__(self, output: Any, effect_receipt: EffectReceipt | None = None) -> None:
        self.output = output
        self.effect_receipt = effect_receipt


def create_tool_result(output: Any, effect_receipt: EffectReceipt | None = None) -> ToolResult:
    """Returns the answer of a successful call: output (any JSON value) and,
    for an external write, the receipt made by create_effect_receipt. A run
    may also return a plain value, which is the output with no receipt."""
    return ToolResult(output, effect_receipt)


class ToubaHandlerError(Exception):
    """A business error with a public code. The host keeps the code as the
    call's error even when the receipt is missing, so choose codes a caller
    can act on ("ExternalWriteRefused"). The message is public too: describe
    the problem without connection strings, queries or private data. details
    is an optional dict; its key "effect_receipt" may only hold a receipt made
    by create_effect_receipt for this call (not_applied after a confirmed
    rollback, unknown when the commit may have happened)."""

    def __init__(self, code: str, message: str = "", details: Mapping | None = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.details = details
