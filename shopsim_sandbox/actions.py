"""Action extraction and parsing (http-contract §9.1–§9.2).

`extract_action` turns an agent's raw `response` text into the action string; `parse_action` checks
its grammar and returns either a parsed `(name, arg)` or a parse failure with its reason code and
Chinese message.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# An Action line starts at the text start or right after an LF; the leading whitespace may span lines.
_ACTION_HEAD = re.compile(r"(?:^|(?<=\n))\s*action\s*:", re.IGNORECASE)
_WS = re.compile(r"\s*")
# Counting rule of §9.2: the value is one or more characters other than CR and LF.
_ACTION_LINE_COUNT = re.compile(r"(?:^|(?<=\n))\s*action\s*:\s*[^\r\n]+", re.IGNORECASE)
# A chain: `]`, optional whitespace, optional separator, then another search/click with its `[`.
_CHAIN = re.compile(r"\]\s*(?:[,;，；]\s*)?(?:search|click)\s*\[", re.IGNORECASE)
_NAME_ARG = re.compile(r"\A([^\[\]\r\n]+)\[([^\n]*)\]\Z")

MSG_EMPTY = "动作不能为空"
MSG_MULTIPLE = "一次调用只能执行一个 search[...] 或 click[...] 动作"
MSG_BAD_FORMAT = "动作格式无效"
MSG_STRICT = "动作必须严格使用 search[...] 或 click[...] 格式"
MSG_NOT_SEARCH_CLICK = "动作必须使用 search[...] 或 click[...] 格式"


def _action_line_values(text: str) -> list[str]:
    values: list[str] = []
    pos = 0
    while True:
        head = _ACTION_HEAD.search(text, pos)
        if head is None:
            return values
        blank = _WS.match(text, head.end())
        assert blank is not None  # \s* matches the empty string, so it matches at every position
        start = blank.end()
        if start < len(text):
            end = text.find("\n", start)
            end = len(text) if end < 0 else end
            values.append(text[start:end].rstrip())
            pos = end
        else:
            trailing = text[head.end():]
            if any(c != "\n" for c in trailing):
                values.append("")
            return values


def extract_action(response: str) -> str:
    """Return the action text extracted from a `response` string (§9.1)."""
    text = response.replace("\\n", "\n")
    values = _action_line_values(text)
    if len(values) == 1:
        return values[0].strip()
    return text.strip()


@dataclass(frozen=True)
class ParsedAction:
    """Result of §9.2: `ok` with a casefolded `name` and raw `arg` (None when bare), or a failure."""

    ok: bool
    name: str = ""
    arg: str | None = None
    reason: str = ""
    message: str = ""


def parse_action(action: str) -> ParsedAction:
    """Parse an extracted action (§9.2); the first failing rule wins."""
    text = action.strip()
    if not text:
        return ParsedAction(False, reason="invalid_format", message=MSG_EMPTY)
    if len(_ACTION_LINE_COUNT.findall(text)) >= 2 or _CHAIN.search(text):
        return ParsedAction(False, reason="multiple_actions_not_allowed", message=MSG_MULTIPLE)
    if "[" not in text and "]" not in text:
        if "\n" in text or "\r" in text:
            return ParsedAction(False, reason="invalid_format", message=MSG_BAD_FORMAT)
        return ParsedAction(True, name=text.strip().casefold(), arg=None)
    match = _NAME_ARG.match(text)
    if match is None:
        return ParsedAction(False, reason="invalid_format", message=MSG_STRICT)
    return ParsedAction(True, name=match.group(1).strip().casefold(), arg=match.group(2))
