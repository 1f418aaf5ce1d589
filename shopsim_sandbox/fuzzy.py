r"""Text matching used by the reward (http-contract §12.3 fuzzy matcher, §12.4 category and title terms).

Python semantics are part of the contract here: ``str.casefold``, Unicode ``\w``,
``difflib.SequenceMatcher`` with its default automatic junk heuristic, and ``round`` (half to even).
"""

from __future__ import annotations

import re
from difflib import SequenceMatcher

__all__ = [
    "MATCH_THRESHOLD",
    "score",
    "matches",
    "token_set",
    "category_parts",
    "title_terms",
]

MATCH_THRESHOLD = 85
"""A pair matches when its score is strictly greater than this."""

_NON_WORD = re.compile(r"\W+")
_CATEGORY_SEPARATORS = re.compile(r"\s*[›>/\\]\s*")
_LATIN_TERM = re.compile(r"[a-z0-9]+(?:[._+\-/][a-z0-9]+)*")
_CJK_RUN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff]+")


def token_set(text: str) -> set[str]:
    """Casefolded word tokens of ``text`` as a set (runs of non-word characters separate tokens)."""
    return set(_NON_WORD.sub(" ", text.casefold()).split())


def _ratio(x: str, y: str) -> int:
    return round(100 * SequenceMatcher(None, x, y).ratio())


def score(a: str, b: str) -> int:
    """Token-set similarity 0–100 of §12.3. Not symmetric: ``a`` is the purchased side, ``b`` the goal side."""
    tokens_a, tokens_b = token_set(a), token_set(b)
    common = tokens_a & tokens_b
    s_a = " ".join(sorted(tokens_a))
    s_b = " ".join(sorted(tokens_b))
    if not common:
        return _ratio(s_a, s_b)
    s_i = " ".join(sorted(common))
    return max(_ratio(s_i, s_a), _ratio(s_i, s_b), _ratio(s_a, s_b))


def matches(purchased: str, goal: str) -> bool:
    """True iff ``score(purchased, goal) > 85`` (argument order as in :func:`score`)."""
    return score(purchased, goal) > MATCH_THRESHOLD


def category_parts(category: str) -> set[str]:
    r"""The casefolded, trimmed, non-empty parts of a category path split on ``›``, ``>``, ``/``, ``\``."""
    parts = (part.strip().casefold() for part in _CATEGORY_SEPARATORS.split(category))
    return {part for part in parts if part}


def title_terms(title: str) -> list[str]:
    """Lexical title terms of §12.4 (the fallback the sandbox always uses), in order, duplicates kept.

    Latin/number tokens of the casefolded title first, then every overlapping two-character
    window of each CJK run (a one-character run yields itself).
    """
    folded = title.casefold()
    terms = [m.group(0) for m in _LATIN_TERM.finditer(folded)]
    for run in _CJK_RUN.findall(folded):
        if len(run) == 1:
            terms.append(run)
        else:
            terms.extend(run[i : i + 2] for i in range(len(run) - 1))
    return terms
