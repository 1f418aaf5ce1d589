"""Budget parser ``instruction-budget-v1`` (http-contract §13): the goal's ``price_upper``.

The rules are an ordered list of backtracking regular expressions. Each rule looks only at its
leftmost match (``re.search``): optional parts are greedy, numbers and whitespace greedy, the gaps
lazy — exactly Python ``re`` preferences, which is what the contract's test vectors encode. A rule
either yields a value, tells the parser to continue with the next rule, or stops it with null.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

__all__ = [
    "BUDGET_PARSER_VERSION",
    "parse_price_upper",
    "goal_price_upper",
    "chinese_numeral_value",
]

BUDGET_PARSER_VERSION = "instruction-budget-v1"

_CN_DIGITS = {"零": 0, "〇": 0, "一": 1, "二": 2, "两": 2, "三": 3, "四": 4,
              "五": 5, "六": 6, "七": 7, "八": 8, "九": 9}
_CN_UNITS = {"十": 10, "百": 100, "千": 1000, "万": 10_000, "亿": 100_000_000}
_CN_CHARS = "零〇一二两三四五六七八九十百千万亿"

# --- lexicon (§13.2) ----------------------------------------------------------------------------
WS = r"\s*"
CN_RUN = f"[{_CN_CHARS}]+"
NUM = rf"(?:\d+(?:\.\d+)?|{CN_RUN})"
SC = r"(?:万|千|k|K)"


def _n(name: str) -> str:
    """N = NUM ws [SC], captured as ``<name>`` (number) and ``<name>_sc`` (scale)."""
    return rf"(?P<{name}>{NUM}){WS}(?P<{name}_sc>{SC})?"


def _n0(name: str) -> str:
    """N° = NUM alone."""
    return rf"(?P<{name}>{NUM})"


CUR = r"(?:元|块钱|块)"
PW = r"(?:预算|价格|价钱|价位|售价|单价|花费|费用|总价|预期价格)"
SEP = r"(?:-|~|～|—|至|到|和)"
P1 = r"(?:在|为|是)"
P2 = r"(?:在|为|是|要在|大概|约|差不多)"
GAP8 = r"[^，。；;]{0,8}?"
GAP12 = rf"[^\d{_CN_CHARS}，。；;]{{0,12}}?"
UPPER = (r"(?:不得超过|不能超过|不要超过|不能高于|不要高于|不超过|不高于|不高过|别超过|别超|不超|低于|小于|不到"
         r"|最高(?:为|是)?|上限(?:为|是)?|只能给到)")
LOWER = r"(?:不低于|至少|(?<!不要)(?<!不能)(?<!不)(?<!别)(?:超过|高于))"
Q1 = r"(?P<q>以内|以下|之内|左右|上下)"
E2 = r"(?:之间|以内|以下|之内)"
E3 = r"(?:之间|以内|以下|之内|左右|上下)"
Q6 = r"(?P<q>以内|以下|之内|左右|上下|大约|上下浮动|内)"
Q15 = (r"(?P<q>以内|以下|之内|左右|上下|大约|上下浮动|内|出头|都不到|拿下|能拿下|帮我搞定|能搞定|搞定|能买|来买"
       r"|应该够|基本能买到|这个价|的价格|的价位|价位|的预算|预算)")
APPROX = frozenset({"左右", "上下", "大约", "上下浮动", "出头"})
_SCALES = {"万": 10_000, "千": 1000, "k": 1000, "K": 1000}


def chinese_numeral_value(run: str) -> int:
    """Value of a Chinese numeral run (§13.2): digit string, ``head unit tail`` shorthand, or positional."""
    if all(ch in _CN_DIGITS for ch in run):
        return int("".join(str(_CN_DIGITS[ch]) for ch in run))
    if (len(run) >= 3 and run[-2] in "十百千万" and run[-1] in _CN_DIGITS
            and all(ch in _CN_DIGITS for ch in run[:-2])):
        head = int("".join(str(_CN_DIGITS[ch]) for ch in run[:-2]))
        unit = _CN_UNITS[run[-2]]
        # Integer arithmetic is exact here and equals the double result for these magnitudes.
        return head * unit + _CN_DIGITS[run[-1]] * unit // 10
    total = section = digit = 0
    for ch in run:
        if ch in _CN_DIGITS:
            digit = _CN_DIGITS[ch]
        elif ch in "十百千":
            section += (digit or 1) * _CN_UNITS[ch]
            digit = 0
        else:  # 万 / 亿 multiply the whole running total
            total = (total + section + digit) * _CN_UNITS[ch]
            section = digit = 0
    return total + section + digit


def _num_value(text: str) -> float:
    if text[0] in _CN_CHARS:
        return float(chinese_numeral_value(text))
    return float(text)  # float() accepts every Unicode decimal digit (full-width ２０００)


def _value(m: re.Match[str], name: str) -> float:
    value = _num_value(m.group(name))
    scale = m.groupdict().get(f"{name}_sc")
    if scale:
        value = value * _SCALES[scale]
    return value


# A rule returns ("value", x), ("continue", None) or ("stop", None).
_Outcome = tuple[str, float | None]
_CONTINUE: _Outcome = ("continue", None)
_STOP: _Outcome = ("stop", None)


def _rule1(m: re.Match[str]) -> _Outcome:
    value = float(int(m.group("a"))) * 10_000 + float(int(m.group("b"))) * 1000
    if m.group("q") in ("左右", "上下"):
        value = value * 1.1
    return ("value", value)


def _range_rule(m: re.Match[str]) -> _Outcome:
    low, high = _value(m, "n1"), _value(m, "n2")
    return ("value", high) if low > 0 and high >= low else _CONTINUE


def _positive_or_stop(approx: bool) -> Callable[[re.Match[str]], _Outcome]:
    def outcome(m: re.Match[str]) -> _Outcome:
        value = _value(m, "n")
        if value > 0:
            return ("value", value * 1.1 if approx else value)
        return _STOP
    return outcome


def _rule6(m: re.Match[str]) -> _Outcome:
    value = _value(m, "n")
    if value == 0:
        return _CONTINUE
    q = m.group("q")
    if (q is not None and q in APPROX) or (q is None and m.group("lai") is not None):
        value = value * 1.1
    return ("value", value)


def _threshold(minimum: float, approx: bool, *, strict: bool = False) -> Callable[[re.Match[str]], _Outcome]:
    def outcome(m: re.Match[str]) -> _Outcome:
        value = _value(m, "n")
        ok = value > minimum if strict else value >= minimum
        if not ok:
            return _CONTINUE
        return ("value", value * 1.1 if approx else value)
    return outcome


def _rule11(m: re.Match[str]) -> _Outcome:
    value = float(chinese_numeral_value(m.group("r")))
    return ("value", value * 1.1) if value >= 1000 else _CONTINUE


def _rule15(m: re.Match[str]) -> _Outcome:
    value = _value(m, "n")
    if value > 0:
        return ("value", value * 1.1 if m.group("q") in APPROX else value)
    return _STOP


def _rule16(m: re.Match[str]) -> _Outcome:
    d = m.group("d")
    return ("value", float((_CN_DIGITS[d] if d else 1) * 10 + 9))


_RULES: list[tuple[int, re.Pattern[str], Callable[[re.Match[str]], _Outcome]]] = [
    (1, re.compile(rf"{PW}(?:金额)?(?:控制)?{P1}?{WS}(?P<a>\d+){WS}万{WS}(?P<b>\d+){WS}(?:千)?{WS}{Q1}?"), _rule1),
    (2, re.compile(rf"{PW}(?:金额)?(?:控制)?{P2}?{WS}{_n('n1')}{WS}{CUR}?{WS}{SEP}{WS}{_n('n2')}{WS}{CUR}?{WS}{E2}"),
     _range_rule),
    (3, re.compile(rf"{PW}?(?:金额)?(?:控制)?{P2}?{WS}{_n('n1')}{WS}{CUR}?{WS}{SEP}{WS}{_n('n2')}{WS}{CUR}{WS}{E3}?"),
     _range_rule),
    (4, re.compile(rf"{PW}?(?:金额)?{GAP8}{UPPER}{WS}{_n('n')}{WS}{CUR}"), _positive_or_stop(False)),
    (5, re.compile(rf"{PW}{GAP8}(?:{LOWER}{WS}{_n('n')}{WS}{CUR}?|{_n('m')}{WS}\+)"), lambda m: _STOP),
    (6, re.compile(rf"{PW}(?:金额)?{GAP12}{_n('n')}{WS}(?P<lai>来|多)?{WS}{CUR}?{WS}{Q6}?"), _rule6),
    (7, re.compile(rf"(?:差不多|大约|大概|约){WS}{_n('n')}{WS}{CUR}"), _positive_or_stop(True)),
    (8, re.compile(rf"{_n('n')}{WS}(?:左右|上下|大约){WS}{CUR}"), _positive_or_stop(True)),
    (9, re.compile(rf"{_n('n')}{WS}多{WS}{CUR}"), _positive_or_stop(True)),
    (10, re.compile(rf"{_n0('n')}{WS}(?:左右|上下){WS}(?:的)?{WS}(?:预算|价位|价格)"), _threshold(100, True)),
    (11, re.compile(rf"(?<![{_CN_CHARS}])(?P<r>[{_CN_CHARS}]*[千万][{_CN_CHARS}]*)(?![{_CN_CHARS}]){WS}(?:左右|上下)"),
     _rule11),
    (12, re.compile(rf"{_n0('n')}{WS}(?:以内|以下|内){WS}(?:能)?(?:拿下|搞定)"), _threshold(0, False, strict=True)),
    (13, re.compile(rf"{_n0('n')}{WS}(?:左右|上下){WS}(?:能)?(?:拿下|搞定)"), _threshold(0, True, strict=True)),
    (14, re.compile(rf"(?:准备(?:了)?|给到){WS}{_n('n')}{WS}{CUR}"), _threshold(0, False, strict=True)),
    (15, re.compile(rf"{_n('n')}{WS}{CUR}{WS}{Q15}"), _rule15),
    (16, re.compile(rf"(?P<d>[二三四五六七八九])?十几{WS}{CUR}"), _rule16),
]


def parse_price_upper(text: str) -> float | None:
    """Budget ceiling stated in ``text`` per §13.2–§13.3, or None; bit-identical to the reference parser.

    Never raises for any string input.
    """
    text = text.replace(",", "").replace("，", "")
    for _number, pattern, outcome in _RULES:
        match = pattern.search(text)
        if match is None:
            continue
        kind, value = outcome(match)
        if kind == "value":
            return float(value)  # type: ignore[arg-type]
        if kind == "stop":
            return None
    if "个位数价格" in text:
        return 9.0
    return None


def _as_python_float(value: Any) -> float:
    if isinstance(value, str):
        return float(value)
    if isinstance(value, (bool, int, float)):
        return float(value)
    raise TypeError(f"not a number: {value!r}")


def goal_price_upper(instruction: dict[str, Any]) -> float | None:
    """The goal's ``price_upper`` for one instruction record (§13.1), never derived from a product price.

    Order: the precomputed ``price_upper`` (unless absent, null or ``""``); else the parse of
    ``instruction_simple`` if non-empty, otherwise of ``instruction``; if that is null and the
    parsed text differs from ``instruction``, the parse of ``instruction``.

    Raises:
        ValueError: the precomputed value is not a finite number >= 0 (the real server refuses to start).
    """
    pre = instruction.get("price_upper")
    if pre is not None and pre != "":
        try:
            value = _as_python_float(pre)
        except (TypeError, ValueError):
            raise ValueError(
                f"instruction task_id={instruction.get('task_id')!r}: price_upper must be a number, "
                f"got {pre!r}; use a number or null"
            ) from None
        if not math.isfinite(value) or value < 0:
            raise ValueError(
                f"instruction task_id={instruction.get('task_id')!r}: price_upper must be finite and >= 0, "
                f"got {pre!r}; use a non-negative number or null"
            )
        return value
    full = instruction.get("instruction") or ""
    simple = instruction.get("instruction_simple") or ""
    text = simple if simple else full
    result = parse_price_upper(str(text))
    if result is None and text != full:
        result = parse_price_upper(str(full))
    return result
