"""A deterministic analyst model: an OpenAI-compatible chat-completions endpoint for Trace2Skill.

``POST /v1/chat/completions`` reads the request (the offered tools and the compact trace in the
first user message) and answers ONE structured tool call built from that trace, so the whole
analyst path (success cards, live failure audits, consolidation, the compiler, the offline judge)
runs with no GPU:

- ``submit_success_cards``: general cards from what the successful steps did (options chosen,
  search used), never instance data;
- a live failure audit (``search``/``click``/``submit_failure_card`` offered): plays the task with
  the privileged gold goal it is given (search the gold title, open the gold product, choose the
  gold options, buy), then submits a card proposing an ADD when a trial reached ``r_success = 1``;
- ``submit_clusters`` / ``submit_initial_skill``: one cluster per mechanism, one chunk per cluster;
- ``submit_verdict`` (the offline judge): satisfied when a purchase exists and every chosen option
  appears in the task instruction.

**Seeded malformed answers.** With probability ``malformed_rate`` (a SHA-256 draw over ``seed`` and
the request's messages without repair messages) the FIRST attempt of a call is malformed — prose
without a tool call, arguments that are not JSON, a missing field, or (for deployable text) a
product id and a task number that the leakage firewall must reject. A request that carries a
``structured_output_repair`` message is always answered validly, so a repair loop with two or more
attempts always converges and a loop that does not resend correctly does not.

Run: ``python -m shopsim_sandbox.analyst --port 0 --ready-file ready.json [--seed N] [--malformed-rate P]
[--leak-card-rate P]`` (``--leak-card-rate``: share of failure cards that copy the gold title into
deployable text, for testing the firewall; default 0).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

__all__ = ["build_analyst_app", "ANALYST_MODEL", "main"]

ANALYST_MODEL = "shopsim-analyst"
_MALFORMED_KINDS = ("prose", "bad_json", "missing_field", "leak")
_LEAK = "参考 ASIN 640012345678 与 task-19 的做法"


def _loads(text: Any) -> Any:
    try:
        return json.loads(text) if isinstance(text, str) else None
    except ValueError:
        return None


def _draw(seed: int, messages: list[dict[str, Any]]) -> tuple[float, str]:
    key = json.dumps(messages, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    digest = hashlib.sha256(f"{seed}:{key}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64, _MALFORMED_KINDS[digest[8] % len(_MALFORMED_KINDS)]


def _is_repair(message: dict[str, Any]) -> bool:
    return message.get("role") == "user" and isinstance(_loads(message.get("content")), dict) and \
        "structured_output_repair" in _loads(message.get("content"))


# --------------------------------------------------------------------------- answers per tool


def _success_cards(payload: dict[str, Any]) -> dict[str, Any]:
    steps = (payload.get("episode") or {}).get("steps") or []
    chose_options = any(s.get("selected_options") for s in steps)
    searched = any(str(s.get("action") or "").startswith("search[") for s in steps)
    cards = []
    if chose_options:
        cards.append({"mechanism": "购买前补齐全部规格", "applicable_when": "商品详情页列出尚未选择的规格轴时",
                      "observed_evidence": "智能体逐个选择规格后购买按钮才出现并成功下单",
                      "decisive_behavior": "先依据需求选择每个规格轴，再点击购买",
                      "generalizable_lesson": "规格未选全时不要购买；逐项对照需求选择", "related_chunk_ids": [],
                      "confidence": 0.8})
    if searched or not cards:
        cards.append({"mechanism": "用需求关键词搜索并核对商品", "applicable_when": "在搜索首页开始任务时",
                      "observed_evidence": "智能体用需求中的品类和属性词搜索，打开匹配的商品",
                      "decisive_behavior": "搜索后先核对品类与属性再打开商品",
                      "generalizable_lesson": "搜索词取自需求的品类和关键属性", "related_chunk_ids": [],
                      "confidence": 0.7})
    return {"cards": cards[: int(payload.get("max_cards", 2))]}


def _audit(messages: list[dict[str, Any]], payload: dict[str, Any], offered: list[str],
           tools: list[dict[str, Any]], leak: bool = False) -> tuple[str, dict[str, Any]]:
    gold = (payload.get("privileged_gold_audit") or {}).get("goal") or {}
    page = ((payload.get("live_session") or {}).get("page")) or {}
    trials: list[dict[str, Any]] = []
    results_pages = 0
    for message in messages:
        if message.get("role") != "tool":
            continue
        body = _loads(message.get("content")) or {}
        if "trial_finished" in body:
            trials.append(body["trial_finished"])
            page = (body.get("new_session") or {}).get("page") or {}
            results_pages = 0
        else:
            page = body.get("page") or page
            if page.get("page_type") == "search_results":
                results_pages += 1
    succeeded = any(t.get("r_success") == 1 for t in trials)
    enum = []
    for tool in tools:
        if tool["function"]["name"] == "click":
            enum = tool["function"]["parameters"]["properties"]["value"]["enum"]
    action = None if (succeeded or len(trials) >= 2) else _next_action(page, gold, enum, offered, results_pages)
    if action is not None:
        return action
    outcome = ((payload.get("episode") or {}).get("outcome") or {})
    detail = outcome.get("reward_detail") or {}
    if detail.get("r_option", 1) < 1:
        mechanism, procedure = "规格选择与需求不一致", "在详情页逐个对照需求选择每个规格轴；购买前复核已选规格"
    elif detail.get("r_type", 1) < 1:
        mechanism, procedure = "买到的品类与需求不符", "打开商品后先核对品类与需求一致；不一致就返回搜索"
    else:
        mechanism, procedure = "购买前未核对需求要点", "购买前逐项核对品类、属性、规格和预算"
    status = "PROPOSE_ADD" if succeeded else "NO_PROPOSAL"
    content = f"### {mechanism}\n\n- Applies when: 准备点击购买时\n- Procedure:\n  1. {procedure}\n" \
              "- Verify: 已选规格与需求逐项一致\n- Avoid: 未核对就购买"
    purchase = (payload.get("privileged_gold_audit") or {}).get("purchase") or {}
    if leak:  # a card that copies the privileged gold title into deployable text: the firewall must force it out
        procedure = f"{procedure}（例如直接买 {gold.get('name')}）"
    return "submit_failure_card", {
        "status": status,
        "privileged_audit": {"gold_asin": gold.get("asin"), "chosen_asin": purchase.get("asin"),
                             "failure_surface": mechanism, "earliest_divergence": "option_selection",
                             "oracle_comparison": f"gold options {gold.get('goal_options')}",
                             "replay_evidence": f"{len(trials)} trial(s); success={succeeded}",
                             "minimal_repair": procedure,
                             "repair_validation_result": "succeeded" if succeeded else "not_reproduced"},
        "deployable_abstraction": {"failure_mechanism": mechanism, "applicable_when": "准备点击购买时",
                                   "observable_trigger": "详情页仍有未核对的规格或属性",
                                   "corrective_procedure": procedure, "verification_step": "已选规格与需求逐项一致",
                                   "target_chunk_id": None, "proposed_content": content},
        "audit_action_summary": f"replayed the task live in {len(trials)} trial(s)"}


def _next_action(page: dict[str, Any], gold: dict[str, Any], enum: list[str], offered: list[str],
                 results_pages: int) -> tuple[str, dict[str, Any]] | None:
    kind = page.get("page_type")
    gold_asin = gold.get("asin")
    if "search" in offered and kind in ("search_home", None):
        return "search", {"query": str(gold.get("name") or "商品")[:40]}
    if kind == "search_results":
        if gold_asin in enum:
            return "click", {"value": gold_asin}
        if "next >" in enum and results_pages < 4:
            return "click", {"value": "next >"}
        return ("click", {"value": "back to search"}) if "back to search" in enum else None
    if kind == "product_detail":
        product = page.get("product") or {}
        if product.get("asin") != gold_asin:
            return ("click", {"value": "< prev"}) if "< prev" in enum else None
        wanted = [str(v) for v in gold.get("goal_options") or []]
        selected = page.get("selected_options") or {}
        missing = page.get("missing_option_axes") or []
        for value in enum:
            axis, _, chosen = value.partition("=")
            if chosen and chosen in wanted and selected.get(axis) != chosen:
                return "click", {"value": value}
        for value in enum:
            axis, _, chosen = value.partition("=")
            if chosen and axis in missing:
                return "click", {"value": value}
        if "buy now" in enum:
            return "click", {"value": "buy now"}
    return None


def _clusters(payload: dict[str, Any]) -> dict[str, Any]:
    limit = int(payload.get("max_clusters", 12))
    groups: dict[str, list[dict[str, Any]]] = {}
    for card in payload.get("cards") or []:
        key = card.get("mechanism") or card.get("failure_mechanism") or "通用"
        groups.setdefault(key, []).append(card)
    clusters, only = [], []
    for i, (mechanism, cards) in enumerate(groups.items()):
        if i >= limit:
            only += [c["card_id"] for c in cards]
            continue
        first = cards[0]
        procedure = first.get("decisive_behavior") or first.get("corrective_procedure") or "按需求逐项核对"
        clusters.append({"workflow_stage": "option_selection" if "规格" in mechanism else "search",
                         "mechanism": mechanism, "applicable_when": first.get("applicable_when") or "购物任务中",
                         "procedure": procedure,
                         "verification": first.get("generalizable_lesson") or first.get("verification_step")
                         or "逐项核对需求", "common_failure": "跳过核对直接购买",
                         "evidence_card_ids": [c["card_id"] for c in cards]})
    return {"clusters": clusters, "evidence_only_card_ids": only}


def _skill(payload: dict[str, Any]) -> dict[str, Any]:
    limit = int(payload.get("max_chunks", 16))
    chunks: list[dict[str, Any]] = []
    only: list[str] = []
    for cluster in payload.get("clusters") or []:
        if len(chunks) >= limit:
            only.append(cluster["cluster_id"])
            continue
        steps = [s for s in re.split(r"[；;]", cluster["procedure"]) if s.strip()] or [cluster["procedure"]]
        chunks.append({"title": cluster["mechanism"], "workflow_stage": cluster["workflow_stage"],
                       "applicable_when": cluster["applicable_when"], "procedure": steps[:8],
                       "verification": cluster["verification"], "common_failure": cluster["common_failure"],
                       "evidence_cluster_ids": [cluster["cluster_id"]]})
    return {"skill_title": "ShopSim 购物技能", "chunks": chunks, "evidence_only_cluster_ids": only,
            "conflicts_resolved": []}


def _verdict(payload: dict[str, Any]) -> dict[str, Any]:
    purchase = payload.get("purchase") or {}
    instruction = str(payload.get("task_instruction") or "")
    options = purchase.get("options") or {}
    values = list(options.values()) if isinstance(options, dict) else list(options)
    satisfied = bool(purchase) and all(str(v) in instruction for v in values)
    return {"satisfied": satisfied, "score": 1.0 if satisfied else 0.0,
            "rationale": "every chosen option appears in the task" if satisfied
            else ("no purchase" if not purchase else "a chosen option is not in the task")}


# --------------------------------------------------------------------------- malformed variants


def _malformed(kind: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    if kind == "prose":
        return {"role": "assistant", "content": "我先说明一下分析思路，然后再提交。"}
    if kind == "bad_json":
        return _message(name, json.dumps(args, ensure_ascii=False)[:-1])
    broken = json.loads(json.dumps(args))
    if kind == "missing_field":
        broken.pop(sorted(broken)[0], None)
    else:  # leak: instance data into the deployable text the firewall guards
        for key in ("cards", "clusters", "chunks"):
            if broken.get(key):
                first = broken[key][0]
                field = "generalizable_lesson" if key == "cards" else ("applicable_when" if key == "chunks"
                                                                         else "procedure")
                first[field] = f"{first.get(field, '')}（{_LEAK}）"
                break
        else:
            broken.pop(sorted(broken)[0], None)
    return _message(name, json.dumps(broken, ensure_ascii=False))


def _message(name: str, arguments: str, call_id: str = "call-analyst-1") -> dict[str, Any]:
    return {"role": "assistant", "content": None,
            "tool_calls": [{"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}]}


def build_analyst_app(*, seed: int = 0, malformed_rate: float = 0.25, leak_card_rate: float = 0.0,
                      model_name: str = ANALYST_MODEL) -> Starlette:
    """The deterministic analyst endpoint as a Starlette app (see the module docstring).

    ``leak_card_rate``: share of failure cards (a SHA-256 draw over seed and episode) whose deployable
    procedure copies the privileged gold title — for testing the firewall on analyst output.
    """
    for name, value in (("malformed_rate", malformed_rate), ("leak_card_rate", leak_card_rate)):
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"{name} must be in [0, 1], got {value}")
    state = {"requests": 0, "malformed": 0}

    async def chat(request: Request) -> Response:
        try:
            body = await request.json()
        except ValueError:
            return JSONResponse({"object": "error", "message": "request body is not JSON", "type": "BadRequestError",
                                 "code": 400}, status_code=400)
        messages = body.get("messages") if isinstance(body, dict) else None
        tools = body.get("tools") if isinstance(body, dict) else None
        if not isinstance(messages, list) or len(messages) < 2 or not isinstance(tools, list) or not tools:
            return JSONResponse({"object": "error", "message": "need messages (system + user) and tools",
                                 "type": "BadRequestError", "code": 400}, status_code=400)
        state["requests"] += 1
        offered = [t["function"]["name"] for t in tools]
        payload = _loads(messages[1].get("content")) or {}
        if "submit_failure_card" in offered:
            episode = str((payload.get("episode") or {}).get("episode_id"))
            leak = _draw(seed, [{"leak": episode}])[0] < leak_card_rate
            name, args = _audit(messages, payload, offered, tools, leak)
        elif "submit_success_cards" in offered:
            name, args = "submit_success_cards", _success_cards(payload)
        elif "submit_clusters" in offered:
            name, args = "submit_clusters", _clusters(payload)
        elif "submit_initial_skill" in offered:
            name, args = "submit_initial_skill", _skill(payload)
        elif "submit_verdict" in offered:
            name, args = "submit_verdict", _verdict(payload)
        else:
            return JSONResponse({"object": "error", "message": f"no analyst behaviour for tools {offered}",
                                 "type": "BadRequestError", "code": 400}, status_code=400)
        repaired = any(_is_repair(m) for m in messages)
        draw, kind = _draw(seed, [m for m in messages if not _is_repair(m)])
        if not repaired and draw < malformed_rate:
            state["malformed"] += 1
            if kind == "leak" and name in ("search", "click", "submit_verdict", "submit_failure_card"):
                kind = "missing_field"  # nothing deployable to leak into: break the schema instead
            message = _malformed(kind, name, args)
        else:
            message = _message(name, json.dumps(args, ensure_ascii=False))
        return JSONResponse({"id": f"analyst-{state['requests']}", "object": "chat.completion",
                             "model": body.get("model", model_name),
                             "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}],
                             "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}})

    async def models(request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{"id": model_name, "object": "model"}]})

    async def stats(request: Request) -> Response:
        return JSONResponse(dict(state))

    return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"]),
                             Route("/v1/models", models), Route("/stats", stats), Route("/health", stats)])


def main(argv: list[str] | None = None) -> int:
    """Serve the analyst on a loopback port (``--port 0``: a free one, written to ``--ready-file``)."""
    import socket

    import uvicorn

    parser = argparse.ArgumentParser(prog="python -m shopsim_sandbox.analyst", description=__doc__.split("\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--malformed-rate", type=float, default=0.25)
    parser.add_argument("--leak-card-rate", type=float, default=0.0)
    parser.add_argument("--ready-file", default=None)
    args = parser.parse_args(argv)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((args.host, args.port))
    port = sock.getsockname()[1]
    app = build_analyst_app(seed=args.seed, malformed_rate=args.malformed_rate, leak_card_rate=args.leak_card_rate)
    if args.ready_file:
        from pathlib import Path

        ready = Path(args.ready_file)
        tmp = ready.with_suffix(".tmp")
        tmp.write_text(json.dumps({"url": f"http://{args.host}:{port}/v1", "model": ANALYST_MODEL}), encoding="utf-8")
        tmp.replace(ready)
    uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False)).run(sockets=[sock])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
