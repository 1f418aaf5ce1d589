"""The baseline policy's decisions: reading the conversation, lapses, hints, the next action.

Pure functions of the messages and offered tools (no I/O); the HTTP
endpoint (``server``) and the episode driver (``episode``) are built on them. The package
docstring describes the play.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass, field
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from shopsim_sandbox.budget import parse_price_upper

__all__ = [
    "DEFAULT_LAPSE_RATES",
    "SERVED_MODEL",
    "LapseRates",
    "Lapses",
    "PolicyAction",
    "Transcript",
    "decide_action",
    "hinted_lapses",
    "read_transcript",
    "search_query",
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

_Probability = Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False, strict=True)]


class LapseRates(BaseModel):
    """The probabilities the policy lapses with: its competence (a checkpoint file sets them).

    Every field defaults to its ``LAPSE_*`` module constant, so ``LapseRates()`` is the baseline
    policy as it always played. Unknown fields are refused.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    ignore_budget: _Probability = LAPSE_IGNORE_BUDGET
    """Per episode: probability of ignoring the budget (default ``LAPSE_IGNORE_BUDGET``)."""
    first_option: _Probability = LAPSE_FIRST_OPTION
    """Per episode: probability of taking each option axis's first value (default ``LAPSE_FIRST_OPTION``)."""
    impatient: _Probability = LAPSE_IMPATIENT
    """Per episode: probability of buying the first product opened (default ``LAPSE_IMPATIENT``)."""
    terse_query: _Probability = LAPSE_TERSE_QUERY
    """Per episode: probability of searching with the instruction's words only (default ``LAPSE_TERSE_QUERY``)."""
    runner_up: _Probability = LAPSE_RUNNER_UP
    """Per results page: probability of opening the second-best listing (default ``LAPSE_RUNNER_UP``)."""


DEFAULT_LAPSE_RATES = LapseRates()
"""The module constants as a ``LapseRates``: what an unconfigured policy plays with."""


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
    unexecuted = {
        m.get("tool_call_id")
        for m in messages
        if isinstance(m, dict) and m.get("role") == "tool" and _is_protocol_feedback(_text_of(m.get("content")))
    }
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
                t.persona_text = (
                    " ".join(str(v) for k, v in persona.items() if k != "用户ID") if isinstance(persona, dict) else ""
                )
            except ValueError:
                t.persona_text = raw.split("\n\n", 1)[0]
        elif role == "user" and not first_user_seen and not _is_protocol_feedback(text):
            first_user_seen = True
            body = text[len(_TASK_PREFIX) :] if text.startswith(_TASK_PREFIX) else text
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
        r"(?:each|every) option (?:axis|dimension)[^.\n]{0,60}(?:instruction|persona|profile|request)"
    ),
    "impatient": re.compile(
        r"比较(?:两三|两到三|几|多)个|换一个商品|换商品|返回结果页换|"
        r"compare (?:several|two|three|a few|multiple)|another product|(?:return|go back) to the results"
    ),
    "terse_query": re.compile(
        r"搜索词[^。\n]{0,20}(?:属性|关键词|名词)|用[^。\n]{0,10}关键词搜索|"
        r"(?:search|query)[^.\n]{0,40}(?:key (?:product )?words|attributes?)"
    ),
}


def hinted_lapses(hints: list[str]) -> frozenset[str]:
    """Names of the ``Lapses`` fields that at least one of the skill hint texts addresses."""
    found: set[str] = set()
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
    r"(?:\n   关键属性：(?P<attrs>.*))?",
    re.M,
)


def _products(observation: str) -> list[_Product]:
    return [
        _Product(m["asin"], m["title"], m["price"], m["attrs"] or "", int(m["rank"]))
        for m in _PRODUCT_BLOCK.finditer(observation)
    ]


def _missing_axes(observation: str) -> list[str]:
    for line in observation.splitlines():
        if line.startswith("仍需选择："):
            return [a for a in line[len("仍需选择：") :].split("、") if a]
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
    r"(?:(?:一|两|几)(?:台|个|副|盏|款|件|双|条|把|瓶|套|些|只|张|支|本|份|盒|包)?|个|款|件)?"
)
_TRAILING_FILLER = re.compile(r"(?:有推荐吗|推荐|就行|就好|即可|吧|吗|呢|的)+$")
MAX_PRODUCTS_OPENED = 4
"""After opening this many products the policy buys what it has open instead of looking further."""


def _bigrams(text: str) -> set[str]:
    grams: set[str] = set()
    for run in _WORDS.findall(text.casefold()):
        if run.isascii() or len(run) == 1:
            grams.add(run)
        else:
            grams.update(run[i : i + 2] for i in range(len(run) - 1))
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
            return _min_price(line[len("- 价格：") :])
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
    runner_up_rate: float = LAPSE_RUNNER_UP
    """Probability, per results page, of opening the runner-up listing (a slip drawn per request)."""

    @classmethod
    def draw(
        cls, rng: random.Random, hinted: frozenset[str] = frozenset(), rates: LapseRates = DEFAULT_LAPSE_RATES
    ) -> Lapses:
        """Draw each lapse independently with its probability in ``rates`` (default: the ``LAPSE_*`` constants).

        A lapse named in ``hinted`` (see ``hinted_lapses``) uses ``SKILL_LAPSE_FACTOR`` times that
        probability. The same four uniform draws are made either way, so with the same ``rng`` a hint
        only ever removes a lapse and no hint gives exactly the unhinted draw. ``rates.runner_up``
        is carried as ``runner_up_rate`` (``decide_action`` draws it per request).
        """

        def lapse(name: str, rate: float) -> bool:
            return rng.random() < (rate * SKILL_LAPSE_FACTOR if name in hinted else rate)

        return cls(
            lapse("ignore_budget", rates.ignore_budget),
            lapse("first_option", rates.first_option),
            lapse("impatient", rates.impatient),
            lapse("terse_query", rates.terse_query),
            rates.runner_up,
        )


def decide_action(t: Transcript, rng: random.Random, lapses: Lapses | None = None) -> PolicyAction:
    """Pick the next action from the transcript alone (never from a goal).

    ``lapses`` (per episode) and ``rng`` (per request, only for the runner-up slip at
    ``lapses.runner_up_rate``) make the play imperfect.
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
            values = [label[len(prefix) :] for label in enum if label.startswith(prefix)]
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
        pick = ranked[1] if len(ranked) > 1 and rng.random() < lapses.runner_up_rate else ranked[0]
        return PolicyAction("click", pick.asin, f"打开最符合任务的商品：{pick.title}")
    if "next >" in enum:
        return PolicyAction("click", "next >", "本页的商品都看过了，翻到下一页。")
    for label in ("back to search", "< prev"):
        if label in enum:
            return PolicyAction("click", label, "返回重新查找。")
    if enum:
        return PolicyAction("click", enum[0], "点击第一个可用元素。")
    return PolicyAction("search", search_query(t.instruction), "重新搜索。")
