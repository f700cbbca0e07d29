"""OpenAI-compatible API of the emulated vLLM server (ThreadingHTTPServer, HTTP/1.1).

Token pacing: first token at TTFT (profile) after arrival, then one chunk of
``tokens_per_chunk`` tokens every ``k / per_stream_rate(running)`` seconds, scheduled on
absolute monotonic deadlines (no drift).  Not affected by SPARK_EMU_TIME_SCALE.
"""

import json
import os
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from . import profiles as P
from . import textgen
from .common import out, sleep_until, vlog

TTFT_BUCKETS = [
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
]
ITL_BUCKETS = [
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
]
E2E_BUCKETS = [
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    120.0,
    240.0,
    480.0,
    960.0,
    1920.0,
    7680.0,
]


class Histogram:
    def __init__(self, buckets):
        self.buckets = buckets
        self.counts = [0] * len(buckets)
        self.sum = 0.0
        self.count = 0

    def observe(self, v):
        self.sum += v
        self.count += 1
        for i, b in enumerate(self.buckets):
            if v <= b:
                self.counts[i] += 1


class EngineDead(Exception):
    pass


class Engine:
    """Shared serving state: admission (max_num_seqs), running count, counters."""

    def __init__(
        self,
        profile,
        served_names,
        model_path,
        max_model_len,
        max_num_seqs,
        reasoning_parser,
        kv_tokens,
        api_proc="",
    ):
        self.profile = profile
        self.served_names = served_names
        self.model_path = model_path
        self.max_model_len = max_model_len
        self.max_num_seqs = max_num_seqs
        self.reasoning = bool(reasoning_parser)
        self.kv_tokens = max(1, kv_tokens)
        self.api_proc = api_proc
        self.cond = threading.Condition()
        self.running = 0
        self.waiting = 0
        self.kv_in_use = 0
        self.prompt_total = 0
        self.gen_total = 0
        self.success = {}
        self.ttft_h = Histogram(TTFT_BUCKETS)
        self.itl_h = Histogram(ITL_BUCKETS)
        self.e2e_h = Histogram(E2E_BUCKETS)
        self.dead = False
        self.hung = False  # the serving_hang fault: no token is generated any more
        self._frozen = None  # what /metrics and the stats line show once hung (see hang)
        self.created = int(time.time())
        self._last_stats = (time.monotonic(), 0, 0)
        self._last_printed_active = False

    # --- admission -------------------------------------------------------------------
    def admit(self, kv):
        with self.cond:
            self.waiting += 1
            while self.running >= self.max_num_seqs and not self.dead:
                self.cond.wait(0.5)
            self.waiting -= 1
            if self.dead:
                raise EngineDead()
            self.running += 1
            self.kv_in_use += kv

    def release(self, kv):
        with self.cond:
            self.running -= 1
            self.kv_in_use -= kv
            self.cond.notify_all()

    def rate(self, depth=0):
        """Per-stream decode tok/s now, for a request `depth` tokens deep (its prompt)."""
        return P.per_stream_tok_s(self.profile, max(1, self.running)) * P.depth_factor(
            self.profile, depth
        )

    def add_tokens(self, n):
        with self.cond:
            self.gen_total += n
            self.kv_in_use += n

    def hang(self):
        """vLLM's API server records the scheduler's figures (requests running and waiting, KV
        use, prompt and generated tokens) only when the engine core sends a step's output
        (v1/engine/async_llm.py output_handler -> PrometheusStatLogger.record): a hung core
        sends none, so /metrics and the stats line keep the last step's figures, whatever
        requests arrive after."""
        with self.cond:
            self.hung = True
            self._frozen = self._live()

    def _live(self):
        return {
            "prompt": self.prompt_total,
            "generation": self.gen_total,
            "running": self.running,
            "waiting": self.waiting,
            "kv": self.kv_in_use,
        }

    def recorded(self):
        """The figures as the API server last recorded them (call with self.cond held)."""
        return self._frozen if self._frozen is not None else self._live()

    def kill(self):
        with self.cond:
            self.dead = True
            self.cond.notify_all()

    # --- periodic stats line (vLLM's LoggingStatLogger) -------------------------------
    def stats_line(self):
        now = time.monotonic()
        t0, p0, g0 = self._last_stats
        dt = max(1e-6, now - t0)
        with self.cond:
            r = self.recorded()
        p1, g1, run, wait, kv = r["prompt"], r["generation"], r["running"], r["waiting"], r["kv"]
        self._last_stats = (now, p1, g1)
        # As vLLM 0.32's LoggingStatLogger.log: idle (not printed) once this interval's and the
        # last one's throughputs are both zero, whatever the requests running say (a hung
        # engine prints one line of 0.0 tokens/s, then nothing).
        active = (p1 - p0) > 0 or (g1 - g0) > 0
        if not active and not self._last_printed_active:
            return
        self._last_printed_active = active
        vlog(
            "INFO",
            "loggers.py:127",
            "Engine 000: Avg prompt throughput: %.1f tokens/s, Avg generation throughput: %.1f tokens/s, "
            "Running: %d reqs, Waiting: %d reqs, GPU KV cache usage: %.1f%%, Prefix cache hit rate: 0.0%%"
            % ((p1 - p0) / dt, (g1 - g0) / dt, run, wait, 100.0 * kv / self.kv_tokens),
            self.api_proc,
        )

    # --- metrics ----------------------------------------------------------------------
    def metrics_text(self):
        name = self.served_names[0]
        lab = 'engine="0",model_name="%s"' % name
        o = []

        def metric(n, typ, help_, samples):
            o.append("# HELP %s %s" % (n, help_))
            o.append("# TYPE %s %s" % (n, typ))
            o.extend(samples)

        def hist(n, help_, h):
            s = []
            for b, c in zip(h.buckets, h.counts, strict=True):
                s.append('%s_bucket{%s,le="%s"} %.1f' % (n, lab, repr(float(b)), c))
            s.append('%s_bucket{%s,le="+Inf"} %.1f' % (n, lab, h.count))
            s.append("%s_count{%s} %.1f" % (n, lab, h.count))
            s.append("%s_sum{%s} %s" % (n, lab, repr(h.sum)))
            metric(n, "histogram", help_, s)

        with self.cond:
            r = self.recorded()
            metric(
                "vllm:num_requests_running",
                "gauge",
                "Number of requests in model execution batches.",
                ["vllm:num_requests_running{%s} %.1f" % (lab, r["running"])],
            )
            metric(
                "vllm:num_requests_waiting",
                "gauge",
                "Number of requests waiting to be processed.",
                ["vllm:num_requests_waiting{%s} %.1f" % (lab, r["waiting"])],
            )
            metric(
                "vllm:kv_cache_usage_perc",
                "gauge",
                "KV-cache usage. 1 means 100 percent usage.",
                ["vllm:kv_cache_usage_perc{%s} %s" % (lab, repr(r["kv"] / float(self.kv_tokens)))],
            )
            metric(
                "vllm:prompt_tokens_total",
                "counter",
                "Number of prefill tokens processed.",
                ["vllm:prompt_tokens_total{%s} %.1f" % (lab, r["prompt"])],
            )
            metric(
                "vllm:generation_tokens_total",
                "counter",
                "Number of generation tokens processed.",
                ["vllm:generation_tokens_total{%s} %.1f" % (lab, r["generation"])],
            )
            succ = []
            for reason in ("stop", "length", "abort"):
                succ.append(
                    'vllm:request_success_total{%s,finished_reason="%s"} %.1f'
                    % (lab, reason, self.success.get(reason, 0))
                )
            metric(
                "vllm:request_success_total",
                "counter",
                "Count of successfully processed requests.",
                succ,
            )
            hist(
                "vllm:time_to_first_token_seconds",
                "Histogram of time to first token in seconds.",
                self.ttft_h,
            )
            hist(
                "vllm:inter_token_latency_seconds",
                "Histogram of inter-token latency in seconds.",
                self.itl_h,
            )
            hist(
                "vllm:e2e_request_latency_seconds",
                "Histogram of e2e request latency in seconds.",
                self.e2e_h,
            )
        return "\n".join(o) + "\n"


def _err(message, typ, code, param=None):
    return {"error": {"message": message, "type": typ, "param": param, "code": code}}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "uvicorn"
    sys_version = ""
    engine = None  # set on the subclass

    def version_string(self):
        return "uvicorn"

    def log_message(self, fmt, *args):  # silence http.server's own log
        pass

    def _access(self, code):
        phrase = {
            200: "OK",
            400: "Bad Request",
            401: "Unauthorized",
            404: "Not Found",
            500: "Internal Server Error",
            405: "Method Not Allowed",
        }.get(code, "")
        out(
            '%sINFO:     %s:%d - "%s %s HTTP/1.1" %d %s'
            % (
                self.engine.api_proc,
                self.client_address[0],
                self.client_address[1],
                self.command,
                self.path,
                code,
                phrase,
            )
        )

    def _send(self, code, body=b"", ctype="application/json", access=True):
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
        elif isinstance(body, str):
            body = body.encode()
        if access:
            self._access(code)
        self.send_response(code)
        if body or ctype != "application/json" or code != 200:
            self.send_header("content-type", ctype)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        if body:
            self.wfile.write(body)

    def _body(self):
        n = int(self.headers.get("content-length") or 0)
        data = self.rfile.read(n) if n else b""
        try:
            return json.loads(data or b"{}")
        except ValueError:
            return None

    def _authorised(self, path):
        """As vLLM's API server: with VLLM_API_KEY set, /v1/* wants `Authorization: Bearer <key>`."""
        key = os.environ.get("VLLM_API_KEY")
        if (
            not key
            or not path.startswith("/v1")
            or self.headers.get("Authorization") == "Bearer " + key
        ):
            return True
        self._send(401, {"error": "Unauthorized"})
        return False

    # --- GET ---------------------------------------------------------------------------
    def do_GET(self):
        e = self.engine
        path = self.path.split("?")[0]
        if not self._authorised(path):
            return
        if path == "/health":
            if e.dead:
                return self._send(500, b"")
            return self._send(200, b"")
        if path == "/version":
            from . import dialects

            return self._send(200, {"version": dialects.version()})
        if path == "/v1/models":
            data = [
                {
                    "id": n,
                    "object": "model",
                    "created": e.created,
                    "owned_by": "vllm",
                    "root": e.model_path,
                    "parent": None,
                    "max_model_len": e.max_model_len,
                    "permission": [
                        {
                            "id": "modelperm-" + uuid.uuid4().hex,
                            "object": "model_permission",
                            "created": e.created,
                            "allow_create_engine": False,
                            "allow_sampling": True,
                            "allow_logprobs": True,
                            "allow_search_indices": False,
                            "allow_view": True,
                            "allow_fine_tuning": False,
                            "organization": "*",
                            "group": None,
                            "is_blocking": False,
                        }
                    ],
                }
                for n in e.served_names
            ]
            return self._send(200, {"object": "list", "data": data})
        if path == "/metrics":
            return self._send(200, e.metrics_text(), "text/plain; version=0.0.4; charset=utf-8")
        if path == "/ping":
            return self._send(200 if not e.dead else 500, b"")
        return self._send(404, {"detail": "Not Found"})

    # --- POST --------------------------------------------------------------------------
    def do_POST(self):
        e = self.engine
        # vLLM times a request from its arrival: reading, tokenizing and queueing count in its TTFT
        t_arrival = time.monotonic()
        path = self.path.split("?")[0]
        req = self._body()
        if not self._authorised(path):
            return
        if req is None:
            return self._send(400, _err("JSON decode error", "BadRequestError", 400))
        if path == "/tokenize":
            return self._tokenize(req)
        if path not in ("/v1/completions", "/v1/chat/completions"):
            return self._send(404, {"detail": "Not Found"})
        model = req.get("model")
        if model not in e.served_names and model is not None:
            return self._send(
                404, _err("The model `%s` does not exist." % model, "NotFoundError", 404)
            )
        model = model or e.served_names[0]
        if e.dead:
            return self._send(
                500,
                _err(
                    "EngineCore encountered an issue. See stack trace (above) for the root cause.",
                    "InternalServerError",
                    500,
                ),
            )
        chat = path.endswith("chat/completions")
        if chat:
            prompt_text = textgen.chat_prompt(req.get("messages") or [])
            prompt_tokens = len(textgen.tokenize(prompt_text))
        else:
            pr = req.get("prompt", "")
            if isinstance(pr, list) and pr and isinstance(pr[0], int):
                prompt_text, prompt_tokens = " ".join(map(str, pr)), len(pr)
            else:
                if isinstance(pr, list):
                    pr = pr[0] if pr else ""
                prompt_text = pr
                prompt_tokens = len(textgen.tokenize(pr))
        max_tokens = req.get("max_completion_tokens") if chat else None
        if max_tokens is None:
            max_tokens = req.get("max_tokens")
        room = e.max_model_len - prompt_tokens
        if prompt_tokens > e.max_model_len or (max_tokens is not None and max_tokens > room):
            msg = (
                "'max_tokens' or 'max_completion_tokens' is too large: %s. This model's maximum context "
                "length is %d tokens and your request has %d input tokens (%s > %d - %d)."
                % (
                    max_tokens,
                    e.max_model_len,
                    prompt_tokens,
                    max_tokens,
                    e.max_model_len,
                    prompt_tokens,
                )
            )
            if max_tokens is None:
                msg = (
                    "This model's maximum context length is %d tokens. However, your request has %d input "
                    "tokens. Please reduce the length of the input messages."
                    % (e.max_model_len, prompt_tokens)
                )
            return self._send(400, _err(msg, "BadRequestError", 400))
        if max_tokens is not None and max_tokens < 1:
            return self._send(
                400,
                _err("max_tokens must be at least 1, got %s." % max_tokens, "BadRequestError", 400),
            )
        cap = max_tokens if max_tokens is not None else room
        ignore_eos = bool(req.get("ignore_eos"))
        min_tokens = int(req.get("min_tokens") or 0)
        if chat:
            r_toks, c_toks, finish = textgen.plan_chat(
                prompt_text, e.reasoning, cap, ignore_eos, min_tokens
            )
            if max_tokens is None and finish == "length":
                finish = "length"
        else:
            c_toks, finish = textgen.plan_completion(prompt_text, cap, ignore_eos, min_tokens)
            r_toks = []
        kinds = [("reasoning", t) for t in r_toks] + [("content", t) for t in c_toks]
        stream = bool(req.get("stream"))
        so = req.get("stream_options") or {}
        rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        try:
            e.admit(prompt_tokens)
        except EngineDead:
            return self._send(
                500, _err("EngineCore encountered an issue.", "InternalServerError", 500)
            )
        with e.cond:
            e.prompt_total += prompt_tokens
        state = {"sent": 0, "kv": prompt_tokens, "prompt": prompt_tokens, "finished": False}
        try:
            if stream:
                self._stream(
                    req, e, model, rid, chat, kinds, finish, prompt_tokens, so, t_arrival, state
                )
            else:
                self._plain(e, model, rid, chat, kinds, finish, prompt_tokens, t_arrival, state)
        except (BrokenPipeError, ConnectionResetError, EngineDead):
            self.close_connection = True
        finally:
            e.release(state["kv"])

    def _pace(self, e, n, t_arrival, emit, state):
        """Call emit(i0, i1) for token groups at their absolute deadlines."""
        k = max(1, int(e.profile["tokens_per_chunk"]))
        depth = state.get("prompt", 0)
        deadline = t_arrival + P.ttft_at(e.profile, depth)
        last = None
        i = 0
        while i < n:
            step = 1 if i == 0 else min(k, n - i)
            if i > 0:
                deadline += step / e.rate(depth)
            sleep_until(deadline)
            while e.hung and not e.dead:  # a hung engine: the request waits, /health says 200
                time.sleep(0.1)
            if e.dead:
                raise EngineDead()
            now = time.monotonic()
            if i == 0:
                e.ttft_h.observe(now - t_arrival)
            else:
                e.itl_h.observe(now - last)
            last = now
            e.add_tokens(step)
            state["kv"] += step
            emit(i, i + step)
            state["sent"] = i + step
            i += step

    def _finish_metrics(self, e, t_arrival, finish):
        e.e2e_h.observe(time.monotonic() - t_arrival)
        with e.cond:
            e.success[finish] = e.success.get(finish, 0) + 1

    def _plain(self, e, model, rid, chat, kinds, finish, prompt_tokens, t_arrival, state):
        self._pace(e, len(kinds), t_arrival, lambda a, b: None, state)
        n = len(kinds)
        reasoning = "".join(t for k, t in kinds if k == "reasoning")
        content = "".join(t for k, t in kinds if k == "content")
        usage = {
            "prompt_tokens": prompt_tokens,
            "total_tokens": prompt_tokens + n,
            "completion_tokens": n,
            "prompt_tokens_details": None,
        }
        if chat:
            msg = {
                "role": "assistant",
                "content": content,
                "refusal": None,
                "annotations": None,
                "audio": None,
                "function_call": None,
                "tool_calls": [],
            }
            if e.reasoning:
                msg["reasoning"] = reasoning or None
            choice = {
                "index": 0,
                "message": msg,
                "logprobs": None,
                "finish_reason": finish,
                "stop_reason": None,
            }
            obj = "chat.completion"
        else:
            choice = {
                "index": 0,
                "text": content,
                "logprobs": None,
                "finish_reason": finish,
                "stop_reason": None,
                "prompt_logprobs": None,
            }
            obj = "text_completion"
        body = {
            "id": rid,
            "object": obj,
            "created": int(time.time()),
            "model": model,
            "choices": [choice],
            "service_tier": None,
            "system_fingerprint": None,
            "usage": usage,
            "prompt_logprobs": None,
            "kv_transfer_params": None,
        }
        self._finish_metrics(e, t_arrival, finish)
        self._send(200, body)

    def _chunk(self, data):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _stream(self, req, e, model, rid, chat, kinds, finish, prompt_tokens, so, t_arrival, state):
        include_usage = bool(so.get("include_usage"))
        continuous = bool(so.get("continuous_usage_stats"))
        created = int(time.time())
        obj = "chat.completion.chunk" if chat else "text_completion"
        self._access(200)
        self.send_response(200)
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        n = len(kinds)

        def usage(done):
            return {
                "prompt_tokens": prompt_tokens,
                "total_tokens": prompt_tokens + done,
                "completion_tokens": done,
            }

        def send_event(choices, done, extra_usage=False):
            ev = {"id": rid, "object": obj, "created": created, "model": model, "choices": choices}
            if (continuous and include_usage) or extra_usage:
                ev["usage"] = usage(done)
            self._chunk(b"data: " + json.dumps(ev, separators=(",", ":")).encode() + b"\n\n")

        def emit(i0, i1):
            if chat and i0 == 0:
                send_event(
                    [
                        {
                            "index": 0,
                            "delta": {"role": "assistant", "content": ""},
                            "logprobs": None,
                            "finish_reason": None,
                        }
                    ],
                    0,
                )
            groups = []
            for kind, tok in kinds[i0:i1]:
                if groups and groups[-1][0] == kind:
                    groups[-1][1].append(tok)
                else:
                    groups.append((kind, [tok]))
            done = i0
            for gi, (kind, toks) in enumerate(groups):
                done += len(toks)
                last = i1 == n and gi == len(groups) - 1
                fr = finish if last else None
                if chat:
                    delta = (
                        {"reasoning": "".join(toks)}
                        if kind == "reasoning"
                        else {"content": "".join(toks)}
                    )
                    ch = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": fr}
                else:
                    ch = {
                        "index": 0,
                        "text": "".join(toks),
                        "logprobs": None,
                        "finish_reason": fr,
                        "stop_reason": None,
                    }
                if last:
                    ch["stop_reason"] = None
                send_event([ch], done)

        if n == 0:
            send_event(
                [
                    {
                        "index": 0,
                        "delta": {"content": ""} if chat else None,
                        "text": "",
                        "logprobs": None,
                        "finish_reason": finish,
                    }
                ],
                0,
            )
        self._pace(e, n, t_arrival, emit, state)
        self._finish_metrics(e, t_arrival, finish)
        if include_usage:
            ev = {
                "id": rid,
                "object": obj,
                "created": created,
                "model": model,
                "choices": [],
                "usage": usage(n),
            }
            self._chunk(b"data: " + json.dumps(ev, separators=(",", ":")).encode() + b"\n\n")
        self._chunk(b"data: [DONE]\n\n")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _tokenize(self, req):
        e = self.engine
        model = req.get("model")
        if model is not None and model not in e.served_names:
            return self._send(
                404, _err("The model `%s` does not exist." % model, "NotFoundError", 404)
            )
        if "messages" in req:
            text = textgen.chat_prompt(req.get("messages") or [])
        else:
            text = req.get("prompt", "")
        toks = textgen.tokenize(text)
        body = {
            "count": len(toks),
            "max_model_len": e.max_model_len,
            "tokens": textgen.token_ids(toks),
            "token_strs": None,
        }
        return self._send(200, body)


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128


def make_server(engine, host, port):
    handler = type("BoundHandler", (Handler,), {"engine": engine})
    return Server((host or "0.0.0.0", port), handler)
