"""Baseline shopping policy served as an OpenAI-compatible chat-completions endpoint.

The policy plays honestly: it reads only what a model would receive — the ``messages`` (task
instruction, persona document, page observations, its own earlier tool calls) and the offered
``tools`` — never a private goal. Its plan per turn:

* search page (``search`` offered): search with the core words of the task instruction plus a few
  wishes from the persona document;
* results page: open the unopened product whose title and key attributes share the most character
  bigrams with the instruction and persona, preferring listings within the budget it reads from
  the instruction or persona; page on when everything listed was opened;
* product page: go back (``< prev``) if the page lacks something the user asked for or is over
  budget (at most ``MAX_PRODUCTS_OPENED`` products); otherwise choose, axis by axis, a value the
  instruction or persona mentions (else the first value), then ``buy now``.

Seeded lapses, drawn once per episode from the app seed, the episode's seed (the request ``seed``
minus the turns already taken) and the task text, make it sometimes ignore the budget, take the
first option value, buy the first product it opens, or search with the instruction's words only —
so its success rate on the synthetic catalog is informative (about 35–45 %) rather than 0 or 100 %.

Like an instruction-following model, it heeds strategy hints: the ``<skill …>…</skill>`` blocks of
the system message (the runtime's skill block) are read, and a hint whose text addresses one of the
lapses (choosing each option per the request, checking the price against the budget, comparing
several candidates before buying, searching with the key product words) makes that lapse rarer
(``SKILL_LAPSE_FACTOR`` times its base rate). Without skill blocks the play is exactly as before.

Wire format follows vLLM/SGLang: ``POST /v1/chat/completions`` (JSON, or SSE chunks with
``stream: true``), ``GET /v1/models``, OpenAI error bodies, ``reasoning_content`` unless thinking
is switched off, ``usage`` (in streams only with ``stream_options.include_usage``).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, AsyncIterator

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from shopsim_sandbox.budget import parse_price_upper
from shopsim_sandbox.faults import FaultConfig, FaultDecision, FaultInjector

__all__ = [
    "SERVED_MODEL",
    "Lapses",
    "PolicyAction",
    "Transcript",
    "build_policy_app",
    "decide_action",
    "measure_success",
    "play_episode",
    "hinted_lapses",
    "read_transcript",
    "search_query",
    "tools_for_state",
    "wishes",
]

SERVED_MODEL = "shopsim-baseline-policy"
"""Model name the baseline endpoint serves (``GET /v1/models``); other names answer 404 like vLLM."""

_TASK_PREFIX = "购物任务：\n"
_PERSONA_HEADER = "用户个人文档：\n"
_MAX_MODEL_LEN = 32768

# Probabilities of the seeded lapses, drawn once per episode (see module docstring). Tuned so that
# the success rate on the default demo catalog's val split lands between 25 % and 60 %.
LAPSE_IGNORE_BUDGET = 0.3
LAPSE_FIRST_OPTION = 0.4
LAPSE_IMPATIENT = 0.4
LAPSE_TERSE_QUERY = 0.5
LAPSE_RUNNER_UP = 0.05
SKILL_LAPSE_FACTOR = 0.25
"""A lapse that a skill hint in the system message addresses keeps this fraction of its base rate."""


# --- reading the conversation ------------------------------------------------------------------

@dataclass
class _Product:
    asin: str
    title: str
    price: str
    attributes: str
    rank: int


@dataclass
class Transcript:
    """What the policy knows: everything comes from the request's ``messages`` and ``tools``."""

    instruction: str = ""
    persona_text: str = ""
    observation: str = ""
    search_offered: bool = False
    click_enum: list[str] | None = None
    tools_offered: bool = False
    past_actions: list[tuple[str, str]] = field(default_factory=list)
    turns: int = 0
    """Model turns already taken (assistant answers and repair prompts): the step index minus one."""
    skill_hints: list[str] = field(default_factory=list)
    """Texts of the ``<skill …>…</skill>`` blocks found in system messages, in order."""


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return "" if content is None else str(content)


def _is_protocol_feedback(text: str) -> bool:
    return text.startswith("{") and '"tool_protocol_error"' in text


def read_transcript(messages: list[Any], tools: list[Any] | None) -> Transcript:
    """Extract instruction, persona, current observation, offered tools and past actions from a request."""
    t = Transcript()
    # Calls answered with protocol feedback were never executed: they are not past actions.
    unexecuted = {m.get("tool_call_id") for m in messages
                  if isinstance(m, dict) and m.get("role") == "tool" and _is_protocol_feedback(_text_of(m.get("content")))}
    first_user_seen = False
    previous_role = None
    for message in messages:
        if not isinstance(message, dict):
            continue
        role = message.get("role")
        text = _text_of(message.get("content"))
        if role == "assistant" or (role == "user" and _is_protocol_feedback(text) and previous_role != "assistant"):
            t.turns += 1
        previous_role = role
        if role == "system":
            t.skill_hints.extend(m.strip() for m in _SKILL_BLOCK.findall(text))
        if role == "system" and _PERSONA_HEADER in text:
            raw = text.split(_PERSONA_HEADER, 1)[1]
            try:
                persona, _end = json.JSONDecoder().raw_decode(raw)
                t.persona_text = " ".join(str(v) for k, v in persona.items() if k != "用户ID") \
                    if isinstance(persona, dict) else ""
            except ValueError:
                t.persona_text = raw.split("\n\n", 1)[0]
        elif role == "user" and not first_user_seen and not _is_protocol_feedback(text):
            first_user_seen = True
            body = text[len(_TASK_PREFIX):] if text.startswith(_TASK_PREFIX) else text
            if "\n\n页面：" in body:
                instruction, rest = body.split("\n\n页面：", 1)
                t.instruction, t.observation = instruction, "页面：" + rest
            else:
                t.instruction = body
        elif role == "tool" and text.startswith("页面："):
            t.observation = text
        elif role == "assistant":
            for call in message.get("tool_calls") or []:
                function = call.get("function") if isinstance(call, dict) else None
                if not isinstance(function, dict) or call.get("id") in unexecuted:
                    continue
                try:
                    args = json.loads(function.get("arguments") or "")
                except (TypeError, ValueError):
                    continue
                if isinstance(args, dict):
                    value = args.get("query", args.get("value"))
                    if isinstance(value, str):
                        t.past_actions.append((str(function.get("name")), value.strip()))
    for tool in tools or []:
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(function, dict):
            continue
        t.tools_offered = True
        if function.get("name") == "search":
            t.search_offered = True
        elif function.get("name") == "click":
            enum = (((function.get("parameters") or {}).get("properties") or {}).get("value") or {}).get("enum")
            t.click_enum = [v for v in enum if isinstance(v, str)] if isinstance(enum, list) else None
    if not t.tools_offered:
        # Text mode (no tools): read the page's own affordances.
        t.search_offered = "- 支持商品搜索" in t.observation
        t.click_enum = _clickables(t.observation)
    return t


_SKILL_BLOCK = re.compile(r"<skill\b[^>]*>(.*?)</skill>", re.S)

# What a hint must talk about to address each lapse (Chinese like the environment and the mined
# chunks, plus the English wording of the same advice). Cues are deliberately specific: a hint about
# paging, loops or protocol must not read as "compare candidates" or "mind the budget".
_LAPSE_CUES: dict[str, re.Pattern[str]] = {
    "ignore_budget": re.compile(r"预算|budget"),
    "first_option": re.compile(
        r"与要求最接近|符合要求的值|不要保留默认|默认值|第一个值|"
        r"first (?:option |listed )?value|default (?:option|value)|"
        r"(?:each|every) option (?:axis|dimension)[^.\n]{0,60}(?:instruction|persona|profile|request)"),
    "impatient": re.compile(
        r"比较(?:两三|两到三|几|多)个|换一个商品|换商品|返回结果页换|"
        r"compare (?:several|two|three|a few|multiple)|another product|(?:return|go back) to the results"),
    "terse_query": re.compile(
        r"搜索词[^。\n]{0,20}(?:属性|关键词|名词)|用[^。\n]{0,10}关键词搜索|"
        r"(?:search|query)[^.\n]{0,40}(?:key (?:product )?words|attributes?)"),
}


def hinted_lapses(hints: list[str]) -> frozenset[str]:
    """Names of the ``Lapses`` fields that at least one of the skill hint texts addresses."""
    found = set()
    for hint in hints:
        text = hint.casefold()
        found.update(name for name, cue in _LAPSE_CUES.items() if cue.search(text))
    return frozenset(found)


def _clickables(observation: str) -> list[str]:
    if "可点击元素：\n" not in observation:
        return []
    block = observation.split("可点击元素：\n", 1)[1]
    return [line[2:] for line in block.splitlines() if line.startswith("- ")]


_PRODUCT_BLOCK = re.compile(
    r"^(?P<rank>\d+)\. (?P<title>.*)\n   ASIN：(?P<asin>\d+)\n   价格：(?P<price>.*)\n   品牌：.*\n   类别：.*"
    r"(?:\n   关键属性：(?P<attrs>.*))?", re.M)


def _products(observation: str) -> list[_Product]:
    return [_Product(m["asin"], m["title"], m["price"], m["attrs"] or "", int(m["rank"]))
            for m in _PRODUCT_BLOCK.finditer(observation)]


def _missing_axes(observation: str) -> list[str]:
    for line in observation.splitlines():
        if line.startswith("仍需选择："):
            return [a for a in line[len("仍需选择："):].split("、") if a]
    return []


def _min_price(price: str) -> float | None:
    try:
        return float(price.split(" to ", 1)[0])
    except ValueError:
        return None


# --- deciding ---------------------------------------------------------------------------------

_WORDS = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff]+|[A-Za-z0-9.]+")
_BUDGET_WORDS = re.compile(r"预算|价格|价位|价钱|元|块|以内|以下|不超过|左右|便宜|节省|性价比|品质|在乎")
# A measure word is dropped only after a numeral ("一台"), or when it is 个/款/件: "台灯" stays whole.
_LEADING_FILLER = re.compile(
    r"^(?:我|请|帮我|给我)?(?:想要|想买|想找|需要|打算买|准备买|挑|买|找|要|来|喜欢|偏好|关注)?"
    r"(?:(?:一|两|几)(?:台|个|副|盏|款|件|双|条|把|瓶|套|些|只|张|支|本|份|盒|包)?|个|款|件)?")
_TRAILING_FILLER = re.compile(r"(?:有推荐吗|推荐|就行|就好|即可|吧|吗|呢|的)+$")
MAX_PRODUCTS_OPENED = 4
"""After opening this many products the policy buys what it has open instead of looking further."""


def _bigrams(text: str) -> set[str]:
    grams: set[str] = set()
    for run in _WORDS.findall(text.casefold()):
        if run.isascii() or len(run) == 1:
            grams.add(run)
        else:
            grams.update(run[i:i + 2] for i in range(len(run) - 1))
    return grams


def wishes(instruction: str, persona_text: str = "") -> list[str]:
    """Short phrases the user asked for (product words, features, option values), budget talk excluded."""
    out: list[str] = []
    for piece in re.split(r"[，,。；;、：:！!？?\s]+", instruction + " " + persona_text):
        piece = _TRAILING_FILLER.sub("", _LEADING_FILLER.sub("", piece.strip()))
        for word in piece.split("的"):
            word = word.strip()
            if word and not _BUDGET_WORDS.search(word) and word not in out:
                out.append(word)
    return out


def search_query(instruction: str) -> str:
    """Core keywords of an instruction: budget clauses and request words dropped."""
    words = wishes(instruction)
    return " ".join(words) or instruction.strip()[:20] or "商品"


def _found(wish: str, page_grams: set[str]) -> bool:
    grams = _bigrams(wish)
    return bool(grams) and len(grams & page_grams) >= 0.6 * len(grams)


@dataclass(frozen=True)
class PolicyAction:
    """One decision: tool name (``search``/``click``), its argument, and a short rationale."""

    name: str
    value: str
    rationale: str

    @property
    def arguments(self) -> dict[str, str]:
        """The tool-call arguments object."""
        return {"query": self.value} if self.name == "search" else {"value": self.value}

    @property
    def text(self) -> str:
        """The legacy text form ``search[...]`` / ``click[...]``."""
        return f"{self.name}[{self.value}]"


def _mentions(value: str, text: str) -> int:
    """How strongly ``text`` (instruction + persona) asks for option ``value``."""
    compact = text.casefold().replace(" ", "")
    parts = [p.strip().casefold() for p in value.split("|") if p.strip()]
    if value.casefold().replace(" ", "") in compact:
        return 3
    if parts and all(p.replace(" ", "") in compact for p in parts):
        return 2
    grams = _bigrams(value)
    return 1 if grams and grams <= _bigrams(text) else 0


def _page_price(observation: str) -> float | None:
    for line in observation.splitlines():
        if line.startswith("- 价格："):
            return _min_price(line[len("- 价格："):])
    return None


def _budget(t: Transcript) -> float | None:
    budget = parse_price_upper(t.instruction)
    return budget if budget is not None else parse_price_upper(t.persona_text)


@dataclass(frozen=True)
class Lapses:
    """The policy's seeded weaknesses for one episode (all off = its best play)."""

    ignore_budget: bool = False
    first_option: bool = False
    impatient: bool = False
    terse_query: bool = False

    @classmethod
    def draw(cls, rng: random.Random, hinted: frozenset[str] = frozenset()) -> "Lapses":
        """Draw each lapse independently with its ``LAPSE_*`` probability.

        A lapse named in ``hinted`` (see ``hinted_lapses``) uses ``SKILL_LAPSE_FACTOR`` times that
        probability. The same four uniform draws are made either way, so with the same ``rng`` a hint
        only ever removes a lapse and no hint gives exactly the unhinted draw.
        """
        def lapse(name: str, rate: float) -> bool:
            return rng.random() < (rate * SKILL_LAPSE_FACTOR if name in hinted else rate)

        return cls(lapse("ignore_budget", LAPSE_IGNORE_BUDGET), lapse("first_option", LAPSE_FIRST_OPTION),
                   lapse("impatient", LAPSE_IMPATIENT), lapse("terse_query", LAPSE_TERSE_QUERY))


def decide_action(t: Transcript, rng: random.Random, lapses: Lapses | None = None) -> PolicyAction:
    """Pick the next action from the transcript alone (never from a goal).

    ``lapses`` (per episode) and ``rng`` (per request, only for rare slips) make the play imperfect.
    """
    lapses = lapses or Lapses()
    enum = t.click_enum or []
    wanted = t.instruction + " " + t.persona_text
    wish_list = wishes(t.instruction, t.persona_text)
    searches = [v for n, v in t.past_actions if n == "search"]
    opened = [v for n, v in t.past_actions if n == "click" and v.isdigit()]
    budget = None if lapses.ignore_budget else _budget(t)

    if t.search_offered:
        extra = [] if lapses.terse_query else [w for w in wish_list if w not in wishes(t.instruction)][:3]
        candidates = [" ".join(wishes(t.instruction) + extra), search_query(t.instruction), t.instruction.strip()]
        fresh = [q for q in candidates if q and q not in searches]
        query = fresh[0] if fresh else candidates[1]
        return PolicyAction("search", query, f"页面可以搜索，用任务里的关键词搜索：{query}")

    on_product = "< prev" in enum and "页面：商品详情" in t.observation
    if on_product:
        page_grams = _bigrams(t.observation.split("\n上次交互结果：", 1)[0])
        missing_wishes = [w for w in wish_list if not _found(w, page_grams)]
        price = _page_price(t.observation)
        over_budget = budget is not None and price is not None and price > budget
        revisit = len(opened) >= 2 and opened[-1] in opened[:-1]
        patient = len(opened) < MAX_PRODUCTS_OPENED and not lapses.impatient and not revisit
        if patient and (missing_wishes or over_budget):
            reason = f"缺少：{'、'.join(missing_wishes)}" if missing_wishes else f"价格 {price} 超出预算 {budget}"
            return PolicyAction("click", "< prev", f"这个商品不合适（{reason}），返回结果列表。")
        if "buy now" in enum:
            return PolicyAction("click", "buy now", "所有规格都已选好，购买。")
        for axis in _missing_axes(t.observation):
            prefix = axis + "="
            values = [label[len(prefix):] for label in enum if label.startswith(prefix)]
            if not values:
                continue
            choice = max(values, key=lambda v: _mentions(v, wanted))
            if _mentions(choice, wanted) == 0 or lapses.first_option:
                choice = values[0]
            return PolicyAction("click", prefix + choice, f"为规格「{axis}」选择 {choice}。")

    listed = [p for p in _products(t.observation) if p.asin in enum]
    products = [p for p in listed if p.asin not in opened]
    if not products and "next >" not in enum:
        # Everything here was seen and rejected: settle for the best of them rather than loop.
        products = listed
    if products:
        want = _bigrams(wanted)

        def merit(p: _Product) -> tuple[int, int, int]:
            price = _min_price(p.price)
            within = not (budget is not None and price is not None and price > budget)
            return (int(within), len(want & _bigrams(p.title + " " + p.attributes)), -p.rank)

        ranked = sorted(products, key=merit, reverse=True)
        pick = ranked[1] if len(ranked) > 1 and rng.random() < LAPSE_RUNNER_UP else ranked[0]
        return PolicyAction("click", pick.asin, f"打开最符合任务的商品：{pick.title}")
    if "next >" in enum:
        return PolicyAction("click", "next >", "本页的商品都看过了，翻到下一页。")
    for label in ("back to search", "< prev"):
        if label in enum:
            return PolicyAction("click", label, "返回重新查找。")
    if enum:
        return PolicyAction("click", enum[0], "点击第一个可用元素。")
    return PolicyAction("search", search_query(t.instruction), "重新搜索。")


# --- the HTTP endpoint ----------------------------------------------------------------------------

def _approx_tokens(text: str) -> int:
    # Roughly one token per CJK character and per Latin word or symbol, like a BPE vocabulary.
    return len(re.findall(r"[\u3400-\u9fff]|[A-Za-z0-9]+|[^\sA-Za-z0-9\u3400-\u9fff]", text))


def _error(status: int, message: str, kind: str) -> JSONResponse:
    return JSONResponse({"object": "error", "message": message, "type": kind, "param": None, "code": status},
                        status_code=status)


_FAULT_TYPES = {429: "TooManyRequestsError", 500: "InternalServerError", 503: "ServiceUnavailableError"}


def _thinking_enabled(body: dict[str, Any]) -> bool:
    kwargs = body.get("chat_template_kwargs")
    if isinstance(kwargs, dict) and kwargs.get("enable_thinking") is False:
        return False
    return body.get("enable_thinking") is not False


@dataclass
class _Completion:
    content: str | None
    reasoning: str | None
    tool_calls: list[dict[str, Any]]
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int


class _PolicyServer:
    def __init__(self, *, seed: int, latency_ms: float, faults: FaultConfig | None, model_name: str,
                 lapses: bool) -> None:
        self.seed = seed
        self.lapses = lapses
        self.latency_ms = float(latency_ms)
        self.faults = FaultInjector(faults)
        self.model_name = model_name
        self.created = int(time.time())

    # -- decision and shaping --

    def _complete(self, body: dict[str, Any], digest: str, fault: FaultDecision) -> _Completion:
        messages = body["messages"]
        tools = body.get("tools") if isinstance(body.get("tools"), list) and body.get("tools") else None
        has_seed = isinstance(body.get("seed"), int) and not isinstance(body.get("seed"), bool)
        request_seed = body["seed"] if has_seed else 0
        transcript = read_transcript(messages, tools)
        rng = random.Random(f"{self.seed}|{request_seed}|{transcript.instruction}|{transcript.observation}")
        # The runtime sends seed = episode seed + step - 1, so this recovers one value per episode;
        # without seeds the lapses depend on the task alone.
        episode_seed = request_seed - transcript.turns if has_seed else None
        lapses = Lapses.draw(random.Random(f"{self.seed}|{episode_seed}|{transcript.instruction}|"
                                           f"{transcript.persona_text}"),
                             hinted_lapses(transcript.skill_hints)) if self.lapses else Lapses()
        action = decide_action(transcript, rng, lapses)
        use_tools = tools is not None and body.get("tool_choice") != "none"
        reasoning = action.rationale if _thinking_enabled(body) else None
        prompt_tokens = sum(_approx_tokens(_text_of(m.get("content"))) + 4 for m in messages if isinstance(m, dict))
        prompt_tokens += _approx_tokens(json.dumps(tools, ensure_ascii=False)) if tools else 0

        def call(name: str, arguments: str, n: int) -> dict[str, Any]:
            call_id = "chatcmpl-tool-" + hashlib.sha256(f"{digest}|{n}".encode()).hexdigest()[:32]
            return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}

        arguments = json.dumps(action.arguments, ensure_ascii=False)
        content: str | None = None
        calls: list[dict[str, Any]] = []
        finish = "tool_calls"
        if fault.length:
            # Cut off while still thinking: no tool call made it out.
            reasoning = (reasoning or action.rationale)[: max(1, len(action.rationale) // 2)]
            finish = "length"
        elif fault.malformed == "text" or not use_tools:
            content = f"Action: {action.text}"
            finish = "stop"
        elif fault.malformed == "two_calls":
            calls = [call(action.name, arguments, 0), call(action.name, arguments, 1)]
        elif fault.malformed == "bad_json":
            calls = [call(action.name, arguments[:-1], 0)]
        else:
            calls = [call(action.name, arguments, 0)]
        completion_text = (reasoning or "") + (content or "") + "".join(
            c["function"]["name"] + c["function"]["arguments"] for c in calls)
        completion_tokens = _approx_tokens(completion_text) + 3
        max_tokens = body.get("max_tokens") or body.get("max_completion_tokens")
        if isinstance(max_tokens, int) and max_tokens > 0 and completion_tokens > max_tokens and finish != "length":
            # The output does not fit: a real server stops mid-generation before any tool call completes.
            content, calls, finish = None, [], "length"
            completion_tokens = max_tokens
        return _Completion(content, reasoning, calls, finish, prompt_tokens, completion_tokens)

    def _usage(self, c: _Completion) -> dict[str, Any]:
        return {"prompt_tokens": c.prompt_tokens, "total_tokens": c.prompt_tokens + c.completion_tokens,
                "completion_tokens": c.completion_tokens, "prompt_tokens_details": None}

    # -- routes --

    async def models(self, request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{
            "id": self.model_name, "object": "model", "created": self.created, "owned_by": "shopsim-sandbox",
            "root": self.model_name, "parent": None, "max_model_len": _MAX_MODEL_LEN, "permission": []}]})

    async def chat_completions(self, request: Request) -> Response:
        raw = await request.body()
        try:
            body = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            return _error(400, f"request body is not valid JSON: {exc}", "BadRequestError")
        if not isinstance(body, dict):
            return _error(400, "request body must be a JSON object", "BadRequestError")
        if body.get("model") != self.model_name:
            return _error(404, f"The model `{body.get('model')}` does not exist.", "NotFoundError")
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            return _error(400, "messages must be a non-empty list", "BadRequestError")
        digest = hashlib.sha256(raw).hexdigest()
        fault = self.faults.decide("chat:" + digest)
        delay = self.latency_ms + fault.delay_ms
        if delay > 0:
            await asyncio.sleep(delay / 1000.0)
        if fault.status is not None:
            return _error(fault.status, f"injected fault: HTTP {fault.status}", _FAULT_TYPES[fault.status])
        completion = self._complete(body, digest, fault)
        response_id = "chatcmpl-" + digest[:32]
        if body.get("stream") is True:
            options = body.get("stream_options")
            include_usage = isinstance(options, dict) and options.get("include_usage") is True
            return StreamingResponse(self._chunks(response_id, completion, include_usage),
                                     media_type="text/event-stream")
        message: dict[str, Any] = {"role": "assistant", "content": completion.content,
                                   "tool_calls": completion.tool_calls}
        if completion.reasoning is not None:
            message["reasoning_content"] = completion.reasoning
        return JSONResponse({
            "id": response_id, "object": "chat.completion", "created": int(time.time()), "model": self.model_name,
            "choices": [{"index": 0, "message": message, "logprobs": None,
                         "finish_reason": completion.finish_reason, "stop_reason": None}],
            "usage": self._usage(completion), "prompt_logprobs": None,
        })

    async def _chunks(self, response_id: str, c: _Completion, include_usage: bool) -> AsyncIterator[bytes]:
        created = int(time.time())

        def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
            payload = {"id": response_id, "object": "chat.completion.chunk", "created": created,
                       "model": self.model_name,
                       "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish,
                                    **({"stop_reason": None} if finish else {})}]}
            return b"data: " + json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode() + b"\n\n"

        yield chunk({"role": "assistant", "content": ""})
        for piece in _pieces(c.reasoning or "", 8):
            yield chunk({"reasoning_content": piece})
        for piece in _pieces(c.content or "", 8):
            yield chunk({"content": piece})
        for index, call in enumerate(c.tool_calls):
            yield chunk({"tool_calls": [{"id": call["id"], "type": "function", "index": index,
                                         "function": {"name": call["function"]["name"], "arguments": ""}}]})
            for piece in _pieces(call["function"]["arguments"], 6):
                yield chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
        yield chunk({"content": ""}, c.finish_reason)
        if include_usage:
            payload = {"id": response_id, "object": "chat.completion.chunk", "created": created,
                       "model": self.model_name, "choices": [], "usage": self._usage(c)}
            yield b"data: " + json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode() + b"\n\n"
        yield b"data: [DONE]\n\n"


def _pieces(text: str, size: int) -> list[str]:
    return [text[i:i + size] for i in range(0, len(text), size)]


def build_policy_app(*, seed: int = 0, latency_ms: float = 0, faults: FaultConfig | None = None,
                     model_name: str = SERVED_MODEL, lapses: bool = True) -> Starlette:
    """Build the baseline policy's ASGI app: ``POST /v1/chat/completions`` and ``GET /v1/models``.

    Responses are deterministic for a given ``seed``, request body and fault sequence. ``latency_ms``
    is added to every completion call (on top of ``faults.latency_ms``). Requests naming another
    model than ``model_name`` get vLLM's 404. ``lapses=False`` switches the seeded per-episode
    imperfection off (the policy's best play; for tests).
    """
    server = _PolicyServer(seed=seed, latency_ms=latency_ms, faults=faults, model_name=model_name, lapses=lapses)
    app = Starlette(routes=[
        Route("/v1/chat/completions", server.chat_completions, methods=["POST"]),
        Route("/v1/models", server.models, methods=["GET"]),
    ])
    app.state.policy = server
    return app


# --- measuring the baseline (a minimal episode loop of its own, independent of shopsimrl_core) -------

_SYSTEM_PROMPT = ("你在一个模拟购物网站上为用户购物。每轮只调用一个提供的工具：可搜索时用简洁关键词 search，"
                  "click 必须原样复制一个可点击值；购买前为每个规格轴选择取值。")
_SKILL_HEADER = "[策略提示（可选参考）]\n下面是通用的购物策略提示，不一定适用于本次任务；采用前请对照当前任务和页面逐条核实。"


def _skill_block(skills: Sequence[str]) -> str:
    lines = [_SKILL_HEADER]
    for number, content in enumerate(skills, start=1):
        lines += [f'<skill id="hint-{number}" version="1">', content.strip(), "</skill>"]
    return "\n".join(lines)


def tools_for_state(state: dict[str, Any]) -> list[dict[str, Any]]:
    """The runtime's dynamic tool schemas for an ``observation_state`` (runtime spec §9.2)."""
    tools: list[dict[str, Any]] = []
    if state.get("search_available") is True:
        tools.append({"type": "function", "function": {
            "name": "search", "description": "按关键词搜索商品（仅在页面提供搜索时可用）",
            "parameters": {"type": "object", "properties": {"query": {
                "type": "string", "minLength": 1, "description": "简洁的商品关键词"}},
                "required": ["query"], "additionalProperties": False}}})
    actions = state.get("actions") or []
    if actions:
        tools.append({"type": "function", "function": {
            "name": "click", "description": "点击当前页面上的一个按钮、商品或规格",
            "parameters": {"type": "object", "properties": {"value": {
                "type": "string", "enum": list(actions), "description": "原样复制一个当前可点击值"}},
                "required": ["value"], "additionalProperties": False}}})
    return tools


async def play_episode(env: Any, model: Any, task_id: int, *, persona: bool = True, seed: int = 0,
                       model_name: str = SERVED_MODEL, max_steps: int = 30,
                       skills: Sequence[str] = ()) -> dict[str, Any]:
    """Play one episode with ``httpx.AsyncClient`` s for the environment and the policy; returns the final result.

    ``env`` posts to ``/api/shop_agent``; ``model`` to ``/v1/chat/completions`` (base URL ending in
    ``/v1``). ``skills`` (hint texts) are appended to the system message as ``<skill>`` blocks, laid
    out like the runtime's skill block; none gives the bare prompt. The lease is always released.
    Raises ``RuntimeError`` on an HTTP error answer.
    """
    reset = (await env.post("/api/shop_agent", json={"action": "reset", "idx": task_id, "if_persona": persona})).json()
    result = reset["result"]
    if "error" in result:
        raise RuntimeError(f"reset {task_id}: {result['error']}")
    env_idx, lease = result["env_idx"], result["lease_id"]
    system = _SYSTEM_PROMPT
    if result.get("user_persona"):
        system += "\n\n" + _PERSONA_HEADER + json.dumps(result["user_persona"], ensure_ascii=False, sort_keys=True)
    if skills:
        system += "\n\n" + _skill_block(skills)
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": system},
        {"role": "user", "content": _TASK_PREFIX + result["task_instruction"] + "\n\n" + result["observation"]}]
    state = result["observation_state"]
    final: dict[str, Any] | None = None
    try:
        for step in range(1, max_steps + 1):
            tools = tools_for_state(state)
            answer = await model.post("/chat/completions", json={
                "model": model_name, "messages": messages, "stream": False, "temperature": 0.0,
                "max_tokens": 1024, "seed": seed + step - 1, "tools": tools, "tool_choice": "auto"})
            if answer.status_code != 200:
                raise RuntimeError(f"model HTTP {answer.status_code}: {answer.text[:200]}")
            choice = answer.json()["choices"][0]
            calls = choice["message"].get("tool_calls") or []
            if choice.get("finish_reason") == "length" and len(calls) != 1:
                final = (await env.post("/api/shop_agent", json={
                    "action": "terminate", "env_idx": env_idx, "lease_id": lease,
                    "termination_reason": "generation_length"})).json()["result"]
                break
            if len(calls) != 1:
                messages.append({"role": "user", "content": "请只调用一个工具。"})
                continue
            call = calls[0]
            args = json.loads(call["function"]["arguments"])
            action = f"{call['function']['name']}[{str(next(iter(args.values()))).strip()}]"
            messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
            step_result = (await env.post("/api/shop_agent", json={
                "action": "interact", "env_idx": env_idx, "lease_id": lease, "response": action})).json()["result"]
            if "error" in step_result:
                raise RuntimeError(f"interact: {step_result['error']}")
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": step_result["observation"]})
            if step_result["done"]:
                final = step_result
                break
            state = step_result["observation_state"]
        if final is None:
            final = (await env.post("/api/shop_agent", json={
                "action": "terminate", "env_idx": env_idx, "lease_id": lease,
                "termination_reason": "action_limit"})).json()["result"]
    finally:
        await env.post("/api/shop_agent", json={"action": "release_one", "env_idx": env_idx, "lease_id": lease})
    return final


async def measure_success(env_url: str, policy_url: str, task_ids: list[int], *, persona: bool = True,
                          seed: int = 0, concurrency: int = 8, model_name: str = SERVED_MODEL,
                          skills: Sequence[str] = ()) -> dict[str, Any]:
    """Play every task once over real HTTP and return ``{episodes, successes, success_rate, mean_reward}``.

    ``policy_url`` is the OpenAI base URL (ending in ``/v1``); ``skills`` as in ``play_episode``.
    """
    import httpx

    gate = asyncio.Semaphore(concurrency)
    async with httpx.AsyncClient(base_url=env_url, timeout=60) as env, \
            httpx.AsyncClient(base_url=policy_url, timeout=60) as model:
        async def one(task_id: int) -> dict[str, Any]:
            async with gate:
                return await play_episode(env, model, task_id, persona=persona, seed=seed + task_id,
                                          model_name=model_name, skills=skills)
        finals = await asyncio.gather(*(one(t) for t in task_ids))
    successes = sum(int((f.get("reward_detail") or {}).get("r_success", 0)) for f in finals)
    rewards = [float(f.get("reward") or 0.0) for f in finals]
    n = len(finals)
    return {"episodes": n, "successes": successes, "success_rate": successes / n if n else 0.0,
            "mean_reward": sum(rewards) / n if n else 0.0,
            "purchases": sum(1 for f in finals if f.get("termination_reason") == "purchase")}


def _main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m shopsim_sandbox.policy",
                                     description="Measure the baseline policy's success rate on a split.")
    parser.add_argument("--env-url", required=True, help="environment base URL, e.g. http://127.0.0.1:5700")
    parser.add_argument("--policy-url", required=True, help="policy base URL ending in /v1")
    parser.add_argument("--split-file", required=True, help="persona_splits JSON file")
    parser.add_argument("--split", default="val", help="split name (default: val)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    with open(args.split_file, encoding="utf-8") as handle:
        splits = json.load(handle)
    try:
        task_ids = splits["splits"][args.split]["task_ids"]
    except (KeyError, TypeError):
        parser.error(f"{args.split_file}: no splits.{args.split}.task_ids; pass --split train, val or test")
    print(json.dumps(asyncio.run(measure_success(args.env_url, args.policy_url, task_ids, seed=args.seed))))
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())
