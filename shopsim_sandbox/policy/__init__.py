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
minus the turns already taken), the task text and a ``temperature`` above 0 (greedy requests keep the
draws of earlier versions; two temperatures are two samples), make it sometimes ignore the budget, take the
first option value, buy the first product it opens, or search with the instruction's words only —
so its success rate on the synthetic catalog is informative (about 35–45 %) rather than 0 or 100 %.

Like an instruction-following model, it heeds strategy hints: the ``<skill …>…</skill>`` blocks of
the system message (the runtime's skill block) are read, and a hint whose text addresses one of the
lapses (choosing each option per the request, checking the price against the budget, comparing
several candidates before buying, searching with the key product words) makes that lapse rarer
(``SKILL_LAPSE_FACTOR`` times its base rate). Without skill blocks the play is exactly as before.

Its competence is set by a *checkpoint file* (``checkpoint``: ``shopsim-policy-checkpoint-v1`` JSON
holding the lapse rates, see ``LapseRates``), so the sandbox can stand in for a series of trained
checkpoints: ``python -m shopsim_sandbox.policy serve --checkpoint FILE --port N --served-model-name
NAME`` starts it like ``vllm serve``; ``shopsim-sandbox serve --policy-checkpoint FILE`` in-process.

Wire format follows vLLM/SGLang: ``POST /v1/chat/completions`` (JSON, or SSE chunks with
``stream: true``), ``GET /v1/models``, OpenAI error bodies, ``reasoning_content`` unless thinking
is switched off, ``usage`` (in streams only with ``stream_options.include_usage``).

Modules: ``decide`` (reading the conversation, lapses and their rates, hints, the next action),
``checkpoint`` (the checkpoint file format and its loader), ``server`` (the HTTP endpoint),
``episode`` (a minimal episode driver that measures the success rate) and ``__main__``
(``python -m shopsim_sandbox.policy serve`` / ``measure``).
"""

from __future__ import annotations

from shopsim_sandbox.policy.checkpoint import (
    POLICY_CHECKPOINT_FORMAT,
    CheckpointError,
    PolicyCheckpoint,
    load_policy_checkpoint,
)
from shopsim_sandbox.policy.decide import (
    DEFAULT_LAPSE_RATES,
    LAPSE_FIRST_OPTION,
    LAPSE_IGNORE_BUDGET,
    LAPSE_IMPATIENT,
    LAPSE_RUNNER_UP,
    LAPSE_TERSE_QUERY,
    MAX_PRODUCTS_OPENED,
    SERVED_MODEL,
    SKILL_LAPSE_FACTOR,
    LapseRates,
    Lapses,
    PolicyAction,
    Transcript,
    decide_action,
    hinted_lapses,
    read_transcript,
    search_query,
    wishes,
)
from shopsim_sandbox.policy.episode import measure_success, play_episode, tools_for_state
from shopsim_sandbox.policy.server import build_policy_app

__all__ = [
    "DEFAULT_LAPSE_RATES",
    "LAPSE_FIRST_OPTION",
    "LAPSE_IGNORE_BUDGET",
    "LAPSE_IMPATIENT",
    "LAPSE_RUNNER_UP",
    "LAPSE_TERSE_QUERY",
    "MAX_PRODUCTS_OPENED",
    "POLICY_CHECKPOINT_FORMAT",
    "SERVED_MODEL",
    "SKILL_LAPSE_FACTOR",
    "CheckpointError",
    "LapseRates",
    "Lapses",
    "PolicyAction",
    "PolicyCheckpoint",
    "Transcript",
    "build_policy_app",
    "decide_action",
    "hinted_lapses",
    "load_policy_checkpoint",
    "measure_success",
    "play_episode",
    "read_transcript",
    "search_query",
    "tools_for_state",
    "wishes",
]
