"""Search engine of http-contract §16: SQLite FTS5 BM25 over weighted fields with han-bigram tokens.

Documents come from the raw catalog records; queries are normalized and tokenized exactly like
documents, turned into an OR of quoted tokens and ranked by `bm25()` with the frozen column weights,
ties broken by ASIN ascending, top 150.
"""

from __future__ import annotations

import re
import sqlite3
import unicodedata
from collections.abc import Iterable
from typing import Any

from shopsim_sandbox.versions import SEARCH_FIELD_WEIGHTS, SEARCH_TOP_K

_CURRENCY_WORDS = re.compile(r"(\d)\s*(?:rmb|cny|yuan)\b")
_PUNCT_RUN = re.compile(r"[，,。；;：:！!？?、|]+")
_CJK_RUN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff]+")
_LATIN_TOKEN = re.compile(r"[a-z0-9]+(?:[._+\-/][a-z0-9]+)*")
_MODEL_RUN = re.compile(r"[a-z0-9._+\-/]+")
_FIELDS = ("title", "brand", "category", "model", "attributes", "options", "bullets")


def normalize_query(text: str) -> str:
    """Normalize a query or document text (§16.2 steps 1–3)."""
    text = unicodedata.normalize("NFKC", text).casefold()
    text = text.replace("人民币", "元").replace("块钱", "元")
    text = _CURRENCY_WORDS.sub(lambda m: m.group(1) + "元", text)
    text = " ".join(text.split())
    text = _PUNCT_RUN.sub(" ", text)
    return " ".join(text.split())


def tokens_of_normalized(text: str) -> list[str]:
    """Tokens of already-normalized text: CJK bigrams first, then Latin/number tokens; deduplicated."""
    out: list[str] = []
    seen: set[str] = set()

    def add(token: str) -> None:
        if token not in seen:
            seen.add(token)
            out.append(token)

    for run in _CJK_RUN.findall(text):
        if len(run) == 1:
            add(run)
        else:
            for i in range(len(run) - 1):
                add(run[i:i + 2])
    for match in _LATIN_TOKEN.finditer(text):
        add(match.group(0))
    return out


def tokenize(text: str) -> list[str]:
    """Normalize then tokenize `text` (§16.2)."""
    return tokens_of_normalized(normalize_query(text))


def model_tokens(title: str) -> list[str]:
    """Model-number tokens of a title (§16.1 `model` field), distinct, in text order."""
    norm = normalize_query(title)
    out: list[str] = []
    for match in _LATIN_TOKEN.finditer(norm):
        token = match.group(0)
        model_run = _MODEL_RUN.match(norm, match.start())
        assert model_run is not None  # every token character is a model-run character
        run = model_run.group(0)
        has_letter = any("a" <= c <= "z" for c in run)
        has_digit = any("0" <= c <= "9" for c in run)
        if has_letter and has_digit and token not in out:
            out.append(token)
    return out


def _is_set(value: Any) -> bool:
    return value is not None and value is not False and not (
        isinstance(value, (int, float)) and not isinstance(value, bool) and value == 0
    ) and value != "" and value != [] and value != {}


def flatten(value: Any) -> str:
    """Flatten a JSON value into text (§16.1 *Flattening*)."""
    pieces: list[str] = []

    def walk(v: Any) -> None:
        if v is None:
            return
        if isinstance(v, list):
            for item in v:
                walk(item)
        elif isinstance(v, dict):
            for key in sorted(v, key=str):
                pieces.append(str(key))
                walk(v[key])
        else:
            pieces.append(str(v))

    walk(value)
    return " ".join(pieces)


def _options_text(record: dict) -> str:
    raw = record.get("customization_options")
    if not (isinstance(raw, dict) and raw):
        raw = record.get("options")
        if not isinstance(raw, dict):
            return ""
    pieces: list[str] = []
    for axis in sorted(raw, key=str):
        name = str(axis).strip()
        if name:
            pieces.append(name)
        entries = raw[axis]
        if not isinstance(entries, list):
            entries = [entries]
        for entry in entries:
            value = entry.get("value") if isinstance(entry, dict) else entry
            if value is None or value == "":
                continue
            text = str(value).strip()
            if text:
                pieces.append(text)
    return " ".join(pieces)


def _first_set(record: dict, *keys: str) -> Any:
    for key in keys:
        if _is_set(record.get(key)):
            return record[key]
    return None


def document_fields(record: dict) -> dict[str, str]:
    """The searchable text of one raw record, one space-joined token string per FTS column (§16.1)."""
    title = _first_set(record, "title", "Title")
    title_text = "" if title is None else str(title)
    brand = _first_set(record, "brand", "shop_name")
    category = _first_set(record, "category", "product_category")
    attributes = _first_set(record, "attribute", "Attributes")
    bullets = _first_set(record, "small_description", "sub_title", "BulletPoints")
    raw = {
        "title": title_text,
        "brand": flatten(brand),
        "category": flatten(category),
        "model": " ".join(model_tokens(title_text)),
        "attributes": flatten(attributes),
        "options": _options_text(record),
        "bullets": flatten(bullets),
    }
    return {name: " ".join(tokenize(text)) for name, text in raw.items()}


def document_key(record: dict) -> str:
    """The search document key of a record: its ASIN as a trimmed string (§16.1)."""
    asin = record.get("asin")
    return "" if asin is None else str(asin).strip()


class SearchIndex:
    """An in-memory FTS5 index over raw catalog records. Not thread-safe: use from one thread."""

    def __init__(self, records: Iterable[dict], loaded_asins: set[str] | frozenset[str]):
        self._loaded = frozenset(loaded_asins)
        self._db = sqlite3.connect(":memory:", check_same_thread=False)
        self._db.execute(
            "CREATE VIRTUAL TABLE docs USING fts5(asin UNINDEXED, "
            + ", ".join(_FIELDS)
            + ", tokenize='unicode61 remove_diacritics 2')"
        )
        rows = []
        seen: set[str] = set()
        for record in records:
            if not isinstance(record, dict):
                continue
            key = document_key(record)
            if not key or key == "nan" or key in seen:
                continue
            seen.add(key)
            fields = document_fields(record)
            rows.append((key, *(fields[f] for f in _FIELDS)))
        self._db.executemany(f"INSERT INTO docs VALUES ({', '.join('?' * 8)})", rows)
        self._db.commit()
        weights = ", ".join(["0.0"] + [repr(SEARCH_FIELD_WEIGHTS[f]) for f in _FIELDS])
        self._sql = (
            f"SELECT asin FROM docs WHERE docs MATCH ? ORDER BY bm25(docs, {weights}), asin LIMIT {SEARCH_TOP_K}"
        )
        self.document_count = len(rows)

    def search(self, query: str) -> tuple[str, list[str]]:
        """Run one query; return (normalized query, ranked ASINs of loaded products, at most 150)."""
        normalized = normalize_query(query)
        tokens = tokens_of_normalized(normalized)
        if not tokens:
            return normalized, []
        match = " OR ".join(f'"{t}"' for t in tokens)
        hits = [row[0] for row in self._db.execute(self._sql, (match,))]
        return normalized, [asin for asin in hits if asin in self._loaded]
