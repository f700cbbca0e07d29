"""The bench's SSE parser on hand-written streams (httpx.MockTransport: no server, no sleeps)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from cluster.bench.history import JsonLinesHistory, compare, make_fingerprint, setup_key
from cluster.bench.models import (
    BenchReport,
    BenchRun,
    BenchSettings,
    ClientOverhead,
    MetricsCheck,
    RequestMetrics,
)
from cluster.bench.runner import percentile
from cluster.bench.server_metrics import parse_counters
from cluster.bench.stream import ChunkParser, _finish, measure_request


def chunk(
    delta: dict | None = None,
    *,
    finish: str | None = None,
    usage: dict | None = None,
    choices: bool = True,
) -> str:
    body: dict = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "delta": delta or {}, "finish_reason": finish}] if choices else [],
    }
    if usage is not None:
        body["usage"] = usage
    return "data: " + json.dumps(body) + "\n\n"


def usage(n: int, prompt: int = 7) -> dict:
    return {"prompt_tokens": prompt, "completion_tokens": n, "total_tokens": prompt + n}


def tokenize_count(text: str) -> int:
    return len(text.split())


class FakeServer:
    """Answers /v1/chat/completions with the given SSE parts and /tokenize by counting words."""

    def __init__(
        self, parts: list[str | Exception], status: int = 200, error_body: dict | None = None
    ):
        self.parts = parts
        self.status = status
        self.error_body = error_body
        self.tokenized: list[str] = []

    async def _stream(self):
        for part in self.parts:
            if isinstance(part, Exception):
                raise part
            yield part.encode()

    def handler(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/tokenize":
            text = json.loads(request.content)["prompt"]
            self.tokenized.append(text)
            return httpx.Response(
                200, json={"count": tokenize_count(text), "max_model_len": 100, "tokens": []}
            )
        assert request.url.path == "/v1/chat/completions"
        body = json.loads(request.content)
        assert body["stream"] is True and body["stream_options"]["include_usage"] is True
        if self.status != 200:
            return httpx.Response(self.status, json=self.error_body or {})
        return httpx.Response(
            200, headers={"content-type": "text/event-stream"}, content=self._stream()
        )

    def client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            base_url="http://test", transport=httpx.MockTransport(self.handler)
        )


def feed(p: ChunkParser, event: str, now: float) -> bool:
    """Feed the `data:` payload of one hand-written event, as httpx-sse hands it over."""
    return p.feed(event.removeprefix("data: ").strip(), now)


async def run(server: FakeServer):
    async with server.client() as client:
        return await measure_request(client, "m", "hi", 64)


# -- timing on a fed parser (times given, so the arithmetic is exact) ------------------------


async def test_multi_token_chunks_are_not_tokens_and_tpot_uses_usage():
    p = ChunkParser(sent=100.0)
    feed(p, chunk({"role": "assistant", "content": ""}), 101.0)  # the role chunk carries no token
    feed(p, chunk({"content": " one"}), 102.0)  # TTFT = 2.0
    feed(p, chunk({"content": " two three four five"}), 102.5)
    feed(p, chunk({"content": " six seven eight nine"}), 103.0)
    feed(p, chunk({"content": " ten eleven"}, finish="length"), 103.5)
    feed(p, chunk(choices=False, usage=usage(11)), 103.6)
    assert feed(p, "data: [DONE]", 103.7) is False
    async with FakeServer([]).client() as client:
        m = (await _finish(client, "m", p, origin=100.0)).metrics
    assert m.ok and m.token_chunks == 4 and m.completion_tokens == 11
    assert m.ttft_s == pytest.approx(2.0) and m.e2e_s == pytest.approx(3.5)
    assert m.tpot_s == pytest.approx(1.5 / 10)
    assert m.decode_tok_s == pytest.approx(10 / 1.5)
    assert m.e2e_tok_s == pytest.approx(11 / 3.5)
    assert m.finish_reason == "length" and not m.tokens_approximate
    assert (m.reasoning_tokens, m.answer_tokens, m.split_approximate) == (0, 11, False)


async def test_a_token_streamed_as_an_empty_delta_is_timed_by_the_usage_it_adds():
    """The real vLLM 0.32 with the lab's byte-level tokenizer: a token that ends inside a UTF-8
    character streams as an empty delta, continuous usage counting it all the same (the shape
    of a real stream). Its time is the first token's, and the last token's."""
    p = ChunkParser(sent=0.0)
    feed(p, chunk({"role": "assistant", "content": ""}, usage=usage(0)), 0.090)
    feed(p, chunk({"content": ""}, usage=usage(1)), 0.097)  # the first token, not yet printable
    feed(p, chunk({"content": "\ufffd\n"}, usage=usage(2)), 0.131)
    feed(p, chunk({"content": ""}, usage=usage(3)), 0.166)
    feed(p, chunk({"content": ""}, finish="length", usage=usage(4)), 0.200)
    feed(p, chunk(choices=False, usage=usage(4)), 0.201)  # the usage-only chunk: no token
    assert feed(p, "data: [DONE]", 0.202) is False
    async with FakeServer([]).client() as client:
        m = (await _finish(client, "m", p, origin=0.0)).metrics
    assert m.ok and m.token_chunks == 4 and m.completion_tokens == 4
    assert m.ttft_s == pytest.approx(0.097) and m.e2e_s == pytest.approx(0.200)
    assert m.tpot_s == pytest.approx((0.200 - 0.097) / 3)


def test_a_token_streamed_as_an_empty_delta_counts_for_the_kind_of_the_piece_that_completes_it():
    p = ChunkParser(sent=0.0)
    feed(p, chunk({"role": "assistant", "content": ""}, usage=usage(0)), 0.1)
    feed(p, chunk({"reasoning": ""}, usage=usage(1)), 0.2)  # no kind shown: held
    feed(p, chunk({"reasoning": "≈ think"}, usage=usage(3)), 0.3)
    feed(p, chunk({"content": "Answer"}, usage=usage(4)), 0.4)
    feed(p, chunk({"content": ""}, finish="length", usage=usage(5)), 0.5)  # ends inside one
    feed(p, chunk(choices=False, usage=usage(5)), 0.6)
    assert p.usage_split() == (3, 2), "exact from usage: no /tokenize needed"


async def test_reasoning_under_both_names_counts_for_ttft_and_split_from_continuous_usage():
    p = ChunkParser(sent=0.0)
    feed(p, chunk({"role": "assistant", "content": ""}, usage=usage(0)), 0.5)
    feed(p, chunk({"reasoning_content": "Okay"}, usage=usage(1)), 1.0)  # older vLLM's name
    feed(p, chunk({"reasoning": " let me think"}, usage=usage(4)), 1.2)  # newer name, 3 tokens
    feed(p, chunk({"content": " The answer"}, usage=usage(6)), 1.4)
    feed(p, chunk({"content": "."}, finish="stop", usage=usage(7)), 1.6)
    feed(p, chunk(choices=False, usage=usage(7)), 1.7)
    feed(p, "[DONE]", 1.8)
    async with FakeServer([]).client() as client:
        measured = await _finish(client, "m", p, origin=0.0)
    m = measured.metrics
    assert m.ttft_s == pytest.approx(1.0)  # the first reasoning chunk, not the first content chunk
    assert (m.completion_tokens, m.reasoning_tokens, m.answer_tokens) == (7, 4, 3)
    assert not m.split_approximate
    assert measured.reasoning == "Okay let me think" and measured.text == " The answer."


# -- whole requests over a mock transport ----------------------------------------------------


async def test_keep_alive_lines_and_comments_are_ignored():
    server = FakeServer(
        [
            ": keep-alive\n\n",
            chunk({"role": "assistant", "content": ""}),
            ": ping\n\n",
            chunk({"content": " hello"}),
            ":\n\n",
            chunk({"content": " world"}, finish="stop"),
            chunk(choices=False, usage=usage(2)),
            ": keep-alive\n\n",
            "data: [DONE]\n\n",
        ]
    )
    m = (await run(server)).metrics
    assert m.ok and m.error is None
    assert (m.completion_tokens, m.token_chunks, m.prompt_tokens) == (2, 2, 7)
    assert server.tokenized == []  # usage was there: no /tokenize


async def test_missing_usage_falls_back_to_tokenize_and_is_marked_approximate():
    server = FakeServer(
        [
            chunk({"reasoning": "first I think"}),
            chunk({"content": " then I answer clearly"}, finish="stop"),
            "data: [DONE]\n\n",
        ]
    )
    measured = await run(server)
    m = measured.metrics
    assert m.ok and m.tokens_approximate and m.split_approximate
    assert m.completion_tokens == tokenize_count("first I think then I answer clearly")
    assert (m.reasoning_tokens, m.answer_tokens) == (3, 4)
    assert m.decode_tok_s is not None or m.e2e_s == m.ttft_s  # computed from the tokenized count


async def test_reasoning_split_from_final_usage_only_uses_tokenize_approximately():
    server = FakeServer(
        [
            chunk({"reasoning": "a b c"}),
            chunk({"content": " d e"}, finish="stop"),
            chunk(choices=False, usage=usage(5)),
            "data: [DONE]\n\n",
        ]
    )
    m = (await run(server)).metrics
    assert m.completion_tokens == 5 and not m.tokens_approximate  # the total is from usage
    assert (m.reasoning_tokens, m.answer_tokens, m.split_approximate) == (3, 2, True)


async def test_reasoning_tokens_from_usage_details_are_exact():
    detail = dict(usage(5), completion_tokens_details={"reasoning_tokens": 2})
    server = FakeServer(
        [
            chunk({"reasoning": "a b"}),
            chunk({"content": " c d e"}, finish="stop"),
            chunk(choices=False, usage=detail),
            "data: [DONE]\n\n",
        ]
    )
    m = (await run(server)).metrics
    assert (m.reasoning_tokens, m.answer_tokens, m.split_approximate) == (2, 3, False)
    assert server.tokenized == []


async def test_server_error_event_mid_stream_is_reported_not_raised():
    server = FakeServer(
        [
            chunk({"content": " partial"}),
            'data: {"error": {"message": "EngineCore encountered an issue.", "type": "InternalServerError", '
            '"code": 500}}\n\n',
            "data: [DONE]\n\n",
        ]
    )
    m = (await run(server)).metrics
    assert not m.ok
    assert "server error mid-stream" in m.error and "EngineCore encountered an issue." in m.error
    assert m.ttft_s is not None and m.token_chunks == 1


async def test_connection_lost_mid_stream_is_reported_not_raised():
    server = FakeServer(
        [chunk({"content": " partial"}), httpx.ReadError("connection reset by peer")]
    )
    m = (await run(server)).metrics
    assert not m.ok and "ReadError" in m.error


async def test_http_error_before_the_stream_is_reported_with_the_server_message():
    server = FakeServer(
        [],
        status=404,
        error_body={
            "error": {
                "message": "The model `m` does not exist.",
                "type": "NotFoundError",
                "code": 404,
            }
        },
    )
    m = (await run(server)).metrics
    assert not m.ok and m.error == "HTTP 404: The model `m` does not exist."


async def test_stream_without_done_is_an_error():
    m = (
        await run(FakeServer([chunk({"content": " a"}), chunk(choices=False, usage=usage(1))]))
    ).metrics
    assert not m.ok and "without [DONE]" in m.error


# -- /metrics, percentiles, history ----------------------------------------------------------

METRICS = """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="qwen"} 2.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="qwen"} 0.0
# HELP vllm:generation_tokens_total Number of generation tokens processed.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="qwen"} 1234.0
vllm:generation_tokens_total{engine="0",model_name="other"} 99.0
"""


def test_prometheus_counters_parsed_with_the_library():
    c = parse_counters(METRICS, "qwen")
    assert (c.running, c.waiting, c.generation_tokens, c.busy) == (2.0, 0.0, 1234.0, True)
    assert parse_counters(METRICS).generation_tokens == 1333.0
    with pytest.raises(ValueError, match="generation_tokens_total"):
        parse_counters("# TYPE x gauge\nx 1\n")


def test_percentile_interpolates_like_numpy():
    assert percentile([1, 2, 3, 4], 50) == 2.5
    assert percentile([1, 2, 3, 4, 5], 90) == pytest.approx(4.6)
    assert percentile([], 50) is None


def _report(at: datetime, decode: float, fingerprint_serve: dict) -> BenchReport:
    fp = make_fingerprint("qwen", fingerprint_serve, image_id="sha256:abc")
    metrics = RequestMetrics(ok=True, decode_tok_s=decode, ttft_s=0.5)
    return BenchReport(
        at=at,
        base_url="http://x",
        model="qwen",
        fingerprint=fp,
        setup_key=setup_key(fp, "p", 64),
        settings=BenchSettings(prompt="p", max_tokens=64, runs=1),
        single=BenchRun(warmup=metrics, runs=[metrics], decode_tok_s=decode, ttft_s=0.5),
        metrics_check=MetricsCheck(available=False),
        client=ClientOverhead(
            max_connections=3,
            loop_lag_max_ms=0,
            loop_lag_p99_ms=0,
            parse_s=0,
            parse_share=0,
            chunks=0,
        ),
    )


async def test_history_compares_with_the_previous_run_of_the_same_setup(tmp_path):
    history = JsonLinesHistory(tmp_path / "h" / "bench.jsonl", BenchReport)
    t0 = datetime(2025, 1, 1, tzinfo=UTC)
    await history.record(_report(t0, 27.3, {"tp": 2}))
    await history.record(_report(t0 + timedelta(hours=1), 40.0, {"tp": 1}))  # another setup
    current = _report(t0 + timedelta(hours=2), 27.1, {"tp": 2})
    previous = await history.previous(current.setup_key)
    assert previous is not None and previous.single.decode_tok_s == 27.3
    (decode, ttft) = compare(current, previous)
    assert decode.describe() == "27.1 tok/s, previous 27.3, -0.7%"
    assert ttft.change_pct == 0.0
    assert (
        make_fingerprint("q", {"a": 1, "b": 2}).hash == make_fingerprint("q", {"b": 2, "a": 1}).hash
    )
