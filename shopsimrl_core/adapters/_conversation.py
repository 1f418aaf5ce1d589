"""The conversation of an episode as the model adapter sends it: a message list that encodes incrementally.

Promise: a ``Conversation`` is a plain ``list`` of message dicts whose ``encoded()`` /
``encoded_items()`` give the same compact JSON as encoding the whole list, while each request
encodes only the messages appended since the previous one (entries must be appended, not edited
in place; see the class).
"""

from __future__ import annotations

from typing import Any

from shopsimrl_core.adapters._json import dumps

__all__ = ["Conversation"]


class Conversation(list[Any]):
    """A message list that keeps the encoded JSON of its entries.

    So a growing conversation is never re-serialised: each request encodes only the messages
    appended since the previous one, into one growing buffer (the prefix is neither encoded nor
    copied again until the body is joined).

    It is a plain ``list`` of message dicts for every other purpose. The promise it relies on:
    entries are appended, never edited in place (an entry *replaced* by another object is noticed
    and re-encoded from there; a dict mutated in place is not).
    """

    __slots__ = ("_buffer", "_sources", "_ends")

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self._buffer = bytearray()  # the encoded messages, comma-separated, without the brackets
        self._sources: list[Any] = []  # the message objects encoded so far
        self._ends: list[int] = []  # buffer length after each of them

    def encoded_items(self) -> bytearray:
        """The comma-separated compact JSON of the messages (no brackets), updated in place."""
        sources, ends, buffer = self._sources, self._ends, self._buffer
        keep = min(len(sources), len(self))
        for index in range(keep):
            if self[index] is not sources[index]:
                keep = index
                break
        if keep < len(sources):
            del sources[keep:], ends[keep:]
            del buffer[ends[-1] if ends else 0 :]
        for message in self[keep:]:
            if buffer:
                buffer += b","
            buffer += dumps(message)
            sources.append(message)
            ends.append(len(buffer))
        return buffer

    def encoded(self) -> bytes:
        """The JSON array of the messages (compact UTF-8)."""
        return b"[" + self.encoded_items() + b"]"
