"""A real OpenAI-compatible stub analyst served over loopback HTTP by uvicorn (run as a subprocess).

Per request it counts the structured_output_repair messages and answers:
no repair -> prose without a tool call; repair of a non-firewall error -> a chunk leaking a product id;
repair of a firewall finding -> a valid chunk.
Every request body (and its Authorization header) is appended to $STUB_LOG.
"""

import json
import os

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route


def _call(args):
    return {"id": "call-1", "type": "function",
            "function": {"name": "submit_skill_chunk", "arguments": json.dumps(args, ensure_ascii=False)}}


async def chat(request: Request):
    body = await request.json()
    with open(os.environ["STUB_LOG"], "a", encoding="utf-8") as fh:
        fh.write(json.dumps({"body": body, "auth": request.headers.get("authorization")}, ensure_ascii=False) + "\n")
    repairs = [json.loads(m["content"])["structured_output_repair"] for m in body["messages"]
               if m["role"] == "user" and "structured_output_repair" in m["content"]]
    label = json.loads(body["messages"][1]["content"])["failure_label"]
    chunk = {"title": "核对规格 " + label.split(":")[-1], "workflow_stage": "option_selection",
             "applicable_when": "详情页有规格轴", "procedure": ["逐个选择规格", "确认后购买"],
             "verification": "规格与要求一致", "common_failure": "默认选项"}
    if not repairs:
        message = {"role": "assistant", "content": "我认为应该核对规格。"}
    elif "leakage firewall" not in repairs[-1]["contract_error"]:
        message = {"role": "assistant", "content": None,
                   "tool_calls": [_call(dict(chunk, procedure=["点击 640099999999"]))]}
    else:
        message = {"role": "assistant", "content": None, "tool_calls": [_call(chunk)]}
    return JSONResponse({"id": "x", "object": "chat.completion", "model": body["model"],
                         "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}]})


async def health(request: Request):
    return JSONResponse({"ok": True})


app = Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"]), Route("/health", health)])
