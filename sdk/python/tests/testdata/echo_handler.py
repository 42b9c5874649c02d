"""A handler for the SDK's child-process tests: it echoes its input, and can
be asked to leave a thread running or to wait for the stop signal."""

import os
import sys
import threading

# The host passes no PYTHONPATH: find the SDK beside this test folder.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

from touba_sdk import ToubaHandlerError, create_effect_receipt, create_tool_result, define_tool  # noqa: E402


def run(value, context):
    if value.get("linger"):
        threading.Thread(target=threading.Event().wait).start()  # would keep a naive process alive
    if value.get("fail"):
        raise ToubaHandlerError(value["fail"], "asked to fail")
    if value.get("wait_for_stop"):
        sys.stderr.write("waiting\n")
        sys.stderr.flush()
        context["stop_event"].wait(30)
    receipt = None
    if context["effect"] is not None:
        receipt = create_effect_receipt(context["effect"], outcome="applied", receipt_ref=f"echo:{context['call_id']}")
    out = {"echo": value, "mode": os.environ.get("TOUBA_HANDLER_MODE", "one-shot"), "pid": os.getpid()}
    return create_tool_result(out, receipt)


define_tool(tool_ref="tool:test/Echo", required_grants=["network"], run=run)
