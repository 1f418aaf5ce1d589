"""Model adapter (runtime spec §7): request body, retries, validation codes, SSE assembly."""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from typing import Any

import httpx
import pytest

from shopsimrl_core.adapters._model import (
    ChatModelClient,
    ModelEndpointFault,
    ModelRequestError,
    backoff_delay,
    endpoint_fault,
)
from shopsimrl_core.adapters._sse import StreamAssembler, StreamFailure, synthesised_call_id
from shopsimrl_core.adapters._validation import GENERATION_LENGTH_MESSAGE, validate_completion

SEARCH_TOOL = [{"type": "function", "function": {"name": "search", "parameters": {}}}]
MESSAGES = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]


def call(name="search", arguments='{"query": "耳机"}', call_id="call-1"):
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def completion(message: dict[str, Any], finish_reason="tool_calls", **extra) -> dict[str, Any]:
    body = {
        "id": "chatcmpl-1",
        "created": 17,
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7},
    }
    body.update(extra)
    return body


class Recorder:
    """A MockTransport handler answering from a script and recording every request."""

    def __init__(self, *answers):
        self.answers = list(answers)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        if callable(answer):
            return answer(request)
        return answer

    def bodies(self):
        return [json.loads(r.content) for r in self.requests]


def make_client(handler, **kwargs) -> ChatModelClient:
    settings = dict(
        base_url="http://model.test/v1/",
        model="m",
        api_key_env=None,
        retry_backoff_seconds=0.0,
        max_retries=3,
        transport=httpx.MockTransport(handler),
    )
    settings.update(kwargs)
    client = ChatModelClient(**settings)
    sleeps: list[float] = []

    async def fake_sleep(seconds: float) -> None:
        sleeps.append(seconds)

    client.sleep = fake_sleep
    client.recorded_sleeps = sleeps  # type: ignore[attr-defined]
    return client


def run(coro):
    return asyncio.run(coro)


async def complete(client: ChatModelClient, tools=SEARCH_TOOL, seed=None):
    async with client:
        return await client.complete(MESSAGES, tools, seed=seed)


# -- request body (§7.1) ------------------------------------------------------------------------


def test_request_body_order_extra_body_top_p_seed_tools():
    rec = Recorder(httpx.Response(200, json=completion({"content": None, "tool_calls": [call()]})))
    client = make_client(
        rec,
        temperature=0.6,
        max_tokens=4096,
        top_p=1.0,
        send_seed=True,
        extra_body={"enable_thinking": True, "top_p": 0.1, "top_k": 20},
    )
    out = run(complete(client, seed=2694671389))
    body = rec.bodies()[0]
    assert list(body) == [
        "model",
        "messages",
        "stream",
        "temperature",
        "max_tokens",
        "enable_thinking",
        "top_p",
        "top_k",
        "seed",
        "tools",
        "tool_choice",
    ]
    assert body["top_p"] == 1.0 and body["seed"] == 2694671389 and body["stream"] is False
    assert body["tool_choice"] == "auto" and body["messages"] == MESSAGES
    assert str(rec.requests[0].url) == "http://model.test/v1/chat/completions"
    assert "authorization" not in rec.requests[0].headers
    assert rec.requests[0].headers["content-type"] == "application/json"
    assert out.protocol_error is None and out.tool_calls[0]["arguments"] == {"query": "耳机"}


def test_optional_keys_left_out():
    rec = Recorder(httpx.Response(200, json=completion({"content": "hi"}, finish_reason="stop")))
    client = make_client(rec, send_seed=False)
    run(complete(client, tools=None, seed=5))
    body = rec.bodies()[0]
    assert "top_p" not in body and "seed" not in body and "tools" not in body and "tool_choice" not in body


def test_api_key_from_named_env_var_and_missing_key_sends_nothing(monkeypatch):
    rec = Recorder(httpx.Response(200, json=completion({"content": None, "tool_calls": [call()]})))
    monkeypatch.setenv("SHOPSIMRL_TEST_KEY", "sk-secret")
    run(complete(make_client(rec, api_key_env="SHOPSIMRL_TEST_KEY")))
    assert rec.requests[0].headers["authorization"] == "Bearer sk-secret"
    monkeypatch.delenv("SHOPSIMRL_TEST_KEY")
    with pytest.raises(ModelRequestError, match="SHOPSIMRL_TEST_KEY is unset") as info:
        run(complete(make_client(rec, api_key_env="SHOPSIMRL_TEST_KEY")))
    assert len(rec.requests) == 1
    assert "sk-secret" not in str(info.value)


def test_identity_has_checkpoint_only_when_set_and_never_stream():
    client = make_client(Recorder(httpx.Response(200)), checkpoint_id="ck", stream=True)
    identity = client.identity
    assert list(identity) == ["provider", "checkpoint_id", "model", "base_url", "transport", "sampling"]
    assert identity["base_url"] == "http://model.test/v1"
    assert "stream" not in json.dumps(identity)
    assert "checkpoint_id" not in make_client(Recorder(httpx.Response(200))).identity


# -- retries (§7.2) -----------------------------------------------------------------------------


@pytest.mark.parametrize("status", [408, 409, 429, 500, 502, 503, 504])
def test_retryable_status_then_success(status):
    rec = Recorder(httpx.Response(status, text="busy"), httpx.Response(200, json=completion({"tool_calls": [call()]})))
    client = make_client(rec)
    out = run(complete(client))
    assert len(rec.requests) == 2 and out.protocol_error is None and out.attempts == 2


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
def test_non_retryable_status_fails_after_one_post(status):
    rec = Recorder(httpx.Response(status, text="x" * 900))
    with pytest.raises(ModelRequestError) as info:
        run(complete(make_client(rec)))
    assert len(rec.requests) == 1
    assert str(info.value) == f"non-retryable model HTTP {status}: " + "x" * 500


def test_exhaustion_names_attempts_and_last_error_and_backs_off():
    rec = Recorder(httpx.Response(503, text="overloaded"))
    client = make_client(rec, max_retries=4, retry_backoff_seconds=1.0)
    client.rng.random = lambda: 0.5  # type: ignore[method-assign]
    with pytest.raises(ModelRequestError, match=r"^model request failed after 4 attempts: .*503.*overloaded"):
        run(complete(client))
    assert len(rec.requests) == 4
    assert client.recorded_sleeps == [1.5, 2.5, 4.5]  # no sleep after the last attempt


def test_backoff_formula():
    assert [backoff_delay(a, 1.0, 0.0) for a in range(7)] == [1, 2, 4, 8, 16, 30, 30]
    assert backoff_delay(0, 0.25, 0.999) == pytest.approx(0.25 + 0.999 * 0.25)
    assert backoff_delay(6, 1.0, 0.5) == 30.5
    assert backoff_delay(3, 0.0, 0.7) == 0.0


@pytest.mark.parametrize(
    "exc",
    [
        httpx.ConnectError("refused"),
        httpx.ReadTimeout("slow"),
        httpx.RemoteProtocolError("broken chunk"),
        httpx.ReadError("reset"),
    ],
)
def test_transport_errors_are_retried(exc):
    rec = Recorder(exc, httpx.Response(200, json=completion({"tool_calls": [call()]})))
    out = run(complete(make_client(rec)))
    assert len(rec.requests) == 2 and out.tool_calls


def test_an_html_200_is_an_endpoint_fault_retried_then_raised():
    """A proxy's error page with status 200 is no completion: retried like a 5xx, then the attempt fails."""
    page = "<!doctype html>\n<html><title>502 Bad Gateway</title>" + "x" * 300
    rec = Recorder(httpx.Response(200, text=page, headers={"content-type": "text/html; charset=utf-8"}))
    client = make_client(rec)
    with pytest.raises(ModelEndpointFault) as caught:
        run(complete(client))
    assert len(rec.requests) == 3 and len(client.recorded_sleeps) == 2
    message = caught.value.one_line()
    assert caught.value.code == "model-endpoint-fault" and isinstance(caught.value, ModelRequestError)
    assert "http://model.test/v1/chat/completions answered HTTP 200 with a text/html body" in message
    assert "'<!doctype html>\\n<html><title>502 Bad Gateway</title>" in message  # escaped, on one line
    assert message.endswith("…") and len(message) < 400


def test_an_endpoint_fault_followed_by_a_completion_succeeds():
    good = httpx.Response(200, json=completion({"tool_calls": [call()]}))
    rec = Recorder(httpx.Response(200, text="<html>oops"), good)
    out = run(complete(make_client(rec)))
    assert len(rec.requests) == 2 and out.tool_calls and out.protocol_error is None and out.attempts == 2


@pytest.mark.parametrize(
    "content, content_type, fault",
    [
        (b"<html>oops", None, "a body that is not JSON; it starts '<html>oops'"),
        (b'{"choices": [1,', "application/json", "a body that is not JSON"),  # cut off: not the model's output
        (b"", "application/json", "an empty body"),
        (b"  \n", None, "an empty body"),
        (b'{"error": {"message": "upstream died"}}', "application/json", "an error object instead of a completion"),
        (b"upstream connect error", "text/plain", "a text/plain body, not JSON"),
        (b"\xe4\xbd\xa0\x00", "text/html", "it starts '\\u4f60\\x00'"),
        # the published protocol errors stay protocol errors
        (b"[]", "application/json", None),
        (b'{"choices": []}', "application/json", None),
        (b'{"choices": [{"message": {"content": "x"}}], "usage": {"total_tokens": NaN}}', "application/json", None),
        (b'{"detail": "x"}', "application/json", None),  # no error key: the §7.3 missing_choices
    ],
)
def test_endpoint_fault_classification(content, content_type, fault):
    found = endpoint_fault(content, content_type)
    assert (found is None) if fault is None else (found is not None and fault in found), found


def test_a_completion_with_an_odd_content_type_is_still_a_completion():
    body = json.dumps(completion({"tool_calls": [call()]})).encode()
    rec = Recorder(httpx.Response(200, content=body, headers={"content-type": "text/plain"}))
    out = run(complete(make_client(rec)))
    assert len(rec.requests) == 1 and out.tool_calls and out.protocol_error is None


def test_a_streamed_html_200_is_an_endpoint_fault():
    rec = Recorder(httpx.Response(200, text="<html>bad gateway</html>", headers={"content-type": "text/html"}))
    with pytest.raises(ModelEndpointFault, match="text/html body"):
        run(complete(make_client(rec, stream=True)))
    assert len(rec.requests) == 3


def test_closed_client_refuses():
    client = make_client(Recorder(httpx.Response(200)))
    run(client.aclose())
    with pytest.raises(RuntimeError, match="closed"):
        run(client.complete(MESSAGES, None, seed=None))


def test_latency_and_usage_captured():
    rec = Recorder(
        httpx.Response(200, json=completion({"tool_calls": [call()]}, system_fingerprint="fp", service_tier="x"))
    )
    out = run(complete(make_client(rec)))
    assert out.latency_ms >= 0 and out.usage["total_tokens"] == 7
    assert out.metadata == {"created": 17, "system_fingerprint": "fp", "service_tier": "x"}
    record = out.to_dict()
    assert list(record) == [
        "content",
        "reasoning",
        "tool_calls",
        "finish_reason",
        "usage",
        "response_id",
        "metadata",
        "latency_ms",
        "protocol_error",
        "policy_failure",
        "raw_response",
    ]
    assert record["raw_response"] is None and record["response_id"] == "chatcmpl-1"
    assert record["tool_calls"] == [
        {"call_id": "call-1", "name": "search", "arguments": {"query": "耳机"}, "raw_arguments": '{"query": "耳机"}'}
    ]


# -- validation (§7.3): every adapter code -----------------------------------------------------

OFFERED = ["search", "click"]

CASES = [
    ([], "invalid_response_body", "model response body must be a JSON object"),
    ({"choices": []}, "missing_choices", "model response has no choices"),
    ({"choices": "x"}, "missing_choices", "model response has no choices"),
    ({"choices": [1]}, "invalid_choice", "model response choice must be an object"),
    ({"choices": [{"message": "x"}]}, "invalid_message", "model response choice has no message object"),
    (completion({"tool_calls": {"a": 1}}), "invalid_tool_calls", "model tool_calls must be a list"),
    (completion({"tool_calls": [1]}), "invalid_tool_call", "model returned an invalid function tool call"),
    (
        completion({"tool_calls": [{**call(), "type": "tool"}]}),
        "invalid_tool_call",
        "model returned an invalid function tool call",
    ),
    (
        completion({"tool_calls": [{"id": "c", "type": "function", "function": "x"}]}),
        "missing_function",
        "tool call has no function object",
    ),
    (completion({"tool_calls": [call(call_id="")]}), "missing_tool_call_id", "tool call has no id"),
    (completion({"tool_calls": [call(name="")]}), "missing_tool_name", "tool call has no function name"),
    (
        completion(
            {
                "tool_calls": [
                    {"id": "c", "type": "function", "function": {"name": "search", "arguments": {"query": "x"}}}
                ]
            }
        ),
        "invalid_arguments_type",
        "tool call arguments must be a JSON string",
    ),
    (
        completion({"tool_calls": [call(arguments='{"query": ')]}),
        "invalid_arguments_json",
        "tool call arguments are not valid JSON: ",
    ),
    (  # RFC 8259 has no NaN and a trace line cannot hold one: a repairable protocol error
        completion({"tool_calls": [call(arguments='{"query": "x", "n": NaN}')]}),
        "invalid_arguments_json",
        "tool call arguments are not valid JSON: NaN is not a finite number: line 1 column 21 (char 20)",
    ),
    (
        completion({"tool_calls": [call(arguments='["x"]')]}),
        "invalid_arguments_object",
        "tool call arguments must decode to an object",
    ),
    (completion({"tool_calls": [call(name="finish")]}), "unavailable_tool", "model called unavailable tool: finish"),
    (
        completion({"tool_calls": [call(), call(call_id="c2")]}),
        "tool_call_count",
        "model must return exactly one tool call, got 2",
    ),
    (
        completion({"content": "Action: click[buy now]"}, finish_reason="stop"),
        "tool_call_count",
        "model must return exactly one tool call, got 0",
    ),
    (
        completion({"content": "我选米白色。", "tool_calls": [call()]}),
        "mixed_content",
        "model must not mix natural-language content with an action tool call",
    ),
]


@pytest.mark.parametrize(("body", "code", "message"), CASES, ids=[c[1] + str(i) for i, c in enumerate(CASES)])
def test_protocol_error_codes(body, code, message):
    out = validate_completion(body, OFFERED)
    assert out.protocol_error["code"] == code
    assert out.protocol_error["message"].startswith(message)
    assert out.policy_failure is None
    assert out.raw_response == body  # rejected outputs keep the whole body


def test_empty_response_without_tools():
    out = validate_completion(completion({"content": "  ", "reasoning_content": "abcd"}, finish_reason="stop"), [])
    assert out.protocol_error == {
        "code": "empty_response",
        "message": "model returned neither content nor tool calls (finish_reason='stop', reasoning_chars=4)",
    }


def test_calls_parsed_before_failure_are_kept_and_unavailable_call_included():
    out = validate_completion(
        completion({"tool_calls": [call(), call(name="nope", call_id="c2"), call(call_id="c3")]}), ["search"]
    )
    assert out.protocol_error["code"] == "unavailable_tool"
    assert [c["call_id"] for c in out.tool_calls] == ["call-1", "c2"]
    out = validate_completion(completion({"tool_calls": [call(), call(arguments="{", call_id="c2")]}), ["search"])
    assert [c["call_id"] for c in out.tool_calls] == ["call-1"]


def test_generation_length_is_the_policy_failure():
    out = validate_completion(
        completion({"content": None, "reasoning_content": "long…"}, finish_reason="length"), OFFERED
    )
    assert out.protocol_error is None
    assert out.policy_failure == {"code": "generation_length", "message": GENERATION_LENGTH_MESSAGE}
    assert out.reasoning == "long…"
    # truncated with invalid partial arguments: protocol error, not policy failure
    out = validate_completion(
        completion({"tool_calls": [call(arguments='{"query": "耳')]}, finish_reason="length"), OFFERED
    )
    assert out.protocol_error["code"] == "invalid_arguments_json" and out.policy_failure is None
    # truncated with exactly one valid call: accepted
    out = validate_completion(completion({"tool_calls": [call()]}, finish_reason="length"), OFFERED)
    assert out.protocol_error is None and out.policy_failure is None
    # two calls and length: policy failure (count != 1)
    out = validate_completion(completion({"tool_calls": [call(), call(call_id="x")]}, finish_reason="length"), OFFERED)
    assert out.policy_failure["code"] == "generation_length"


def test_content_parts_and_reasoning_fallback():
    out = validate_completion(
        completion({"content": [{"type": "text", "text": "a"}, {"text": "b"}], "reasoning": "r"}, finish_reason="stop"),
        [],
    )
    assert out.content == "ab" and out.reasoning == "r" and out.protocol_error is None
    out = validate_completion(completion({"content": 42}, finish_reason="stop"), [])
    assert out.content == "42"


# -- streaming (§7.5) ---------------------------------------------------------------------------


def sse(*events, done=True) -> bytes:
    lines = [": keep-alive", ""]
    for event in events:
        lines.append("data: " + (event if isinstance(event, str) else json.dumps(event, ensure_ascii=False)))
        lines.append("")
    if done:
        lines.append("data: [DONE]")
        lines.append("")
    return ("\n".join(lines) + "\n").encode("utf-8")


FRAGMENTED = [
    {
        "id": "chatcmpl-9",
        "created": 1,
        "choices": [{"index": 0, "delta": {"role": "assistant", "reasoning_content": "想"}}],
    },
    {"id": "other", "choices": [{"index": 0, "delta": {"reasoning_content": "一想"}}]},
    {
        "choices": [
            {
                "index": 0,
                "delta": {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": "call-s1",
                            "type": "function",
                            "function": {"name": "sea", "arguments": '{"que'},
                        }
                    ]
                },
            }
        ]
    },
    {
        "choices": [
            {
                "index": 0,
                "delta": {"tool_calls": [{"index": 0, "function": {"name": "rch", "arguments": 'ry": "耳机"}'}}]},
            }
        ]
    },
    {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}], "usage": {"total_tokens": 1}},
    {"choices": [], "usage": {"total_tokens": 9}, "system_fingerprint": "fp"},
]


def test_fragmented_stream_is_assembled():
    rec = Recorder(httpx.Response(200, content=sse(*FRAGMENTED), headers={"content-type": "text/event-stream"}))
    out = run(complete(make_client(rec, stream=True)))
    assert rec.bodies()[0]["stream"] is True
    assert out.protocol_error is None
    assert out.tool_calls == [
        {"call_id": "call-s1", "name": "search", "arguments": {"query": "耳机"}, "raw_arguments": '{"query": "耳机"}'}
    ]
    assert out.reasoning == "想一想" and out.content is None
    assert out.response_id == "chatcmpl-9" and out.usage == {"total_tokens": 9}
    assert out.finish_reason == "tool_calls" and out.metadata == {"created": 1, "system_fingerprint": "fp"}


def test_stream_without_id_gets_synthesised_call_id():
    events = [
        {
            "id": "resp-1",
            "choices": [
                {
                    "delta": {
                        "tool_calls": [
                            {"type": "function", "function": {"name": "click", "arguments": '{"value": "米白"}'}}
                        ]
                    }
                }
            ],
        },
        {"choices": [{"delta": {}, "finish_reason": "tool_calls"}]},
    ]
    assembler = StreamAssembler()
    for line in sse(*events).decode().split("\n"):
        assembler.feed_line(line)
    body = assembler.body()
    call_id = body["choices"][0]["message"]["tool_calls"][0]["id"]
    expected_s = '{"arguments": "{\\"value\\": \\"米白\\"}", "index": 0, "name": "click", "response_id": "resp-1"}'
    assert call_id == "call-stream-" + hashlib.sha256(expected_s.encode("utf-8")).hexdigest()[:24]
    assert call_id == synthesised_call_id("resp-1", 0, "click", '{"value": "米白"}')
    out = validate_completion(body, ["click"])
    assert out.protocol_error is None and out.tool_calls[0]["call_id"] == call_id


@pytest.mark.parametrize(
    "payload",
    [
        sse(FRAGMENTED[0], done=False),
        sse(done=True),
        sse("[1, 2]"),
        sse({"error": {"message": "oom"}}),
        sse("{not json"),
    ],
    ids=["no-done", "no-data", "non-object", "error-event", "non-json"],
)
def test_broken_stream_is_retried_from_scratch(payload):
    good = httpx.Response(200, content=sse(*FRAGMENTED))
    rec = Recorder(httpx.Response(200, content=payload), good)
    out = run(complete(make_client(rec, stream=True)))
    assert len(rec.requests) == 2
    assert out.tool_calls[0]["name"] == "search"


def test_broken_stream_exhausts_attempts():
    rec = Recorder(httpx.Response(200, content=sse(done=True)))
    with pytest.raises(ModelRequestError, match="after 2 attempts: broken stream: stream carried no data"):
        run(complete(make_client(rec, stream=True, max_retries=2)))


def test_stream_status_errors_follow_the_retry_table():
    rec = Recorder(httpx.Response(429, text="slow down"), httpx.Response(200, content=sse(*FRAGMENTED)))
    out = run(complete(make_client(rec, stream=True)))
    assert len(rec.requests) == 2 and out.protocol_error is None
    rec = Recorder(httpx.Response(400, text="bad request"))
    with pytest.raises(ModelRequestError, match="non-retryable model HTTP 400: bad request"):
        run(complete(make_client(rec, stream=True)))


def test_stream_text_only_and_length_policy():
    events = [
        {"id": "r", "choices": [{"delta": {"content": ""}}]},
        {"choices": [{"delta": {}, "finish_reason": "length"}]},
    ]
    rec = Recorder(httpx.Response(200, content=sse(*events)))
    out = run(complete(make_client(rec, stream=True)))
    assert out.content is None  # "" becomes null
    assert out.policy_failure["code"] == "generation_length"
    assert out.raw_response["choices"][0]["finish_reason"] == "length"


def test_stream_assembler_requires_done_and_data():
    with pytest.raises(StreamFailure):
        StreamAssembler().body()


# -- request encoding and the JSON codec (orjson with the stdlib's behaviour) ----------------------

from shopsimrl_core.adapters._conversation import Conversation  # noqa: E402
from shopsimrl_core.adapters._http import StreamReply  # noqa: E402
from shopsimrl_core.adapters._json import copy_json, dumps_line, loads, loads_finite  # noqa: E402

CLICK_TOOL = [
    {
        "type": "function",
        "function": {
            "name": "click",
            "parameters": {
                "type": "object",
                "properties": {"value": {"type": "string", "enum": ["白色 500ml", "buy now", "back to search"]}},
            },
        },
    }
]


@pytest.mark.parametrize(
    "settings",
    [
        {},
        {"top_p": 0.9, "extra_body": {"repetition_penalty": 1.05, "chat_template_kwargs": {"enable_thinking": False}}},
        {"extra_body": {"model": "shadowed", "messages": [], "stream": True}},  # extra_body may shadow anything
        {"send_seed": False, "tool_choice": "required"},
    ],
)
def test_encoded_body_is_the_built_body_in_the_same_key_order(settings):
    client = ChatModelClient(base_url="http://m/v1", model="模型-1", api_key_env=None, **settings)
    messages = Conversation([{"role": "system", "content": '系统\n"引号" \\ 斜杠'}, {"role": "user", "content": "u"}])
    for seed, tools in ((7, SEARCH_TOOL), (2**70, CLICK_TOOL), (None, None)):
        encoded = client.encode_body(messages, tools, seed)
        built = client.build_body(list(messages), tools, seed)
        assert json.loads(encoded) == built
        assert list(json.loads(encoded)) == list(built)  # the contract's key order survives
        messages.append({"role": "tool", "tool_call_id": "c", "content": "观察 " * 50})


def test_conversation_keeps_encoded_messages_and_notices_replaced_entries():
    messages = Conversation([{"role": "user", "content": "a"}])
    first = messages.encoded()
    kept = messages._sources[0]
    messages.append({"role": "assistant", "content": None, "tool_calls": []})
    assert json.loads(messages.encoded()) == list(messages)
    assert messages._sources[0] is kept and messages._ends[0] == len(first) - 2  # the prefix was not encoded again
    messages[0] = {"role": "user", "content": "b"}  # replaced, not edited in place: noticed
    assert json.loads(messages.encoded()) == list(messages) and json.loads(first) == [{"role": "user", "content": "a"}]
    del messages[1:]
    assert json.loads(messages.encoded()) == [{"role": "user", "content": "b"}]
    assert isinstance(messages, list) and json.dumps(messages) == json.dumps(list(messages))


def test_copy_json_is_a_deep_copy_of_decoded_json():
    text = '{"a": [1, 2.5, {"b": "观察", "c": null, "d": true}], "e": {"f": [[]]}, "g": 1234567890123456789012}'
    value = json.loads(text)
    value["t"] = (1, [2])  # not JSON: handed to copy.deepcopy
    copied = copy_json(value)
    assert copied == value and copied is not value
    assert copied["a"] is not value["a"] and copied["a"][2] is not value["a"][2]
    assert copied["e"]["f"][0] is not value["e"]["f"][0]
    assert copied["a"][2]["b"] is value["a"][2]["b"]  # immutable scalars are shared, as deepcopy shares them
    assert copied["t"] == (1, [2]) and copied["t"][1] is not value["t"][1]
    copied["a"][2]["b"] = "changed"
    copied["e"]["f"][0].append(1)
    assert value["a"][2]["b"] == "观察" and value["e"]["f"] == [[]]  # the original is untouched


def test_non_finite_settings_are_written_as_the_stdlib_writes_them():
    client = ChatModelClient(base_url="http://m/v1", model="m", api_key_env=None, extra_body={"penalty": float("nan")})
    encoded = client.encode_body(MESSAGES, None, 1)
    assert b'"penalty":NaN' in encoded  # orjson would have written null, changing the request's meaning
    assert json.loads(encoded)["messages"] == MESSAGES


@pytest.mark.parametrize(
    "text",
    [
        '{"a": 1',
        "NaN",
        '{"a": NaN}',
        "[1e400]",
        '{"big": 123456789012345678901234567890}',
        '{"nested": [{"n": -9223372036854775809}], "ok": 1}',
        "[18446744073709551615, 18446744073709551616, -9223372036854775808]",
        '{"id": "sku 12345678901234567890123", "price": 12.5}',
        "[0.12345678901234567890123, 1e300, -1.5e19, 9.2e18]",
        '"\\ud800"',
        '\ufeff{"bom": true}',
        "",
        "  null  ",
        "[1e308, 1.7976931348623157e309]",  # msgspec refuses the overflow; the stdlib reads inf
        "1 2",
        '"\x01"',
        '{"dup": 1, "dup": 2}',
        "[-0, -0.0, 1e-400, 0.1e1]",
        # escaped text (what Python servers write by default) is read by orjson first: the same values
        '{"t": "\\u9875\\u9762", "big": 123456789012345678901234567890, "neg": -9223372036854775809}',
        '["\\u4e2d", 18446744073709551615, 9223372036854775807, 1e19, -1.5e19, 9.2e18, 0.1, -0.0]',
        '{"\\u4e2d": 1, "\\u4e2d": 2, "nested": [[{"x": "\\u00e9\\n"}]]}',
        '{"t": "\\u4e2d", "r": NaN}',
        '{"t": "\\u4e2d", "r": 1e400}',
        '{"t": "\\ud83d\\ude00 \\ud800"}',
        '\ufeff{"t": "\\u4e2d"}',
        '{"t": "\\u4e2d"',
    ],
)
def test_loads_gives_the_stdlib_values_and_errors(text):
    try:
        expected: Any = ("ok", json.loads(text))
    except json.JSONDecodeError as exc:
        expected = ("error", str(exc))
    try:
        got: Any = ("ok", loads(text.encode("utf-8")) if not text.startswith("\ufeff") else loads(text))
    except json.JSONDecodeError as exc:
        got = ("error", str(exc))
    assert repr(got) == repr(expected)


class _Float(float):
    pass


@pytest.mark.parametrize(
    "record",
    [
        {"episode_id": "e", "steps": [{"observation": "商品 \"引号\" \n\t\u0001", "reward": 1e-05}], "n": 2**70},
        {"episode_id": "e", 1: "non-string key"},
        {"episode_id": "e", "x": _Float(0.5), "nested": [[{"y": -0.0}]]},
    ],
)
def test_trace_lines_carry_the_values_the_stdlib_would(record):
    line = dumps_line(record)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert json.loads(line) == json.loads(json.dumps(record, ensure_ascii=False))


@pytest.mark.parametrize(
    "value, error",
    [
        (float("nan"), ValueError),
        (float("-inf"), ValueError),
        (_Float("nan"), ValueError),  # orjson refuses float subclasses; the stdlib refuses the NaN
        ("\ud800", ValueError),  # a lone surrogate cannot be UTF-8
        (object(), TypeError),
    ],
)
def test_trace_lines_refuse_what_the_stdlib_refuses(value, error):
    with pytest.raises(error):
        dumps_line({"episode_id": "e", "deep": [{"v": [value]}]})


def test_invalid_json_response_keeps_the_stdlib_message():
    # since issue 24 only a body the stdlib parses with its NaN/Infinity literals reaches this code
    text = '{"choices": [{"message": {"content": "x"}}], "n": NaN}'
    rec = Recorder(httpx.Response(200, content=text.encode()))
    out = run(complete(make_client(rec)))
    assert len(rec.requests) == 1
    assert out.protocol_error is not None and out.protocol_error["code"] == "invalid_json_response"
    assert out.protocol_error["message"].startswith("model response is not valid JSON: NaN is not a finite number")
    assert out.raw_response == {"text": text}


@pytest.mark.parametrize("stream", [False, True])
def test_a_non_finite_number_in_a_model_answer_is_a_protocol_error(stream):
    body = json.dumps(completion({"tool_calls": [call()]}, usage={"total_tokens": float("inf")}))
    assert "Infinity" in body  # what a Python server writes for inf
    if stream:
        content = f"data: {body}\n\ndata: [DONE]\n\n".encode()
        with pytest.raises(StreamFailure, match="stream event is not JSON: Infinity is not a finite number"):
            feed = StreamAssembler()
            for line in content.decode().splitlines():
                feed.feed_line(line)
        return
    out = run(complete(make_client(Recorder(httpx.Response(200, content=body.encode())))))
    assert out.protocol_error is not None and out.protocol_error["code"] == "invalid_json_response"
    assert "Infinity is not a finite number" in out.protocol_error["message"] and out.tool_calls == []


@pytest.mark.parametrize(
    "text, literal",
    [('{"a": NaN}', "NaN"), ("[1, -Infinity]", "-Infinity"), ('{"r": 1e400}', "1e400"), ("Infinity", "Infinity")],
)
def test_loads_finite_names_the_literal_it_refuses(text, literal):
    for data in (text, text.encode("utf-8")):
        with pytest.raises(json.JSONDecodeError, match=f"^{re.escape(literal)} is not a finite number") as info:
            loads_finite(data)
        assert info.value.pos == text.index(literal)
    assert loads_finite('{"a": 1e308, "b": [0.5, -0.0], "c": 123456789012345678901234567890}') == json.loads(
        '{"a": 1e308, "b": [0.5, -0.0], "c": 123456789012345678901234567890}'
    )


def test_trace_lines_skip_only_the_parts_the_caller_vouches_for():
    record = {"episode_id": "e", "steps": [{"t": 0.5}], "provenance": {"sampling": {"temperature": float("nan")}}}
    with pytest.raises(ValueError):
        dumps_line(record, finite=("steps",))  # provenance is not vouched for: still checked
    record["provenance"]["sampling"]["temperature"] = 0.0
    assert dumps_line(record, finite=("steps",)) == dumps_line(record)


def test_stream_lines_split_on_every_line_ending_across_chunks():
    async def chunks():
        for piece in (b"data: a\r", b"\ndata: \xe8\x80", b"\xb3\rdata: c\n\n", b"data: tail"):
            yield piece

    async def main():
        return [line async for line in StreamReply(200, chunks(), "utf-8").lines()]

    assert run(main()) == ["data: a", "data: 耳", "data: c", "", "data: tail"]
