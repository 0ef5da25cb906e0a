#!/usr/bin/env python3
"""`amk serve` end to end: starts the server on the CPU with a real model on a free loopback port
and drives it with the real `openai` client, with curl and with raw sockets. Every wait is bounded
in count and time. Exits 0 and prints "serve_test: all checks passed", else 1 naming the check.

  serve_test.py --amk build/amk --model SmolLM2-135M-Instruct.Q4_1.gguf

Run by tests/test_server.cpp (ServeSmolLM2.*) with scripts/pyenv.sh's python.
"""
import argparse
import concurrent.futures
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

import openai
from prometheus_client.parser import text_string_to_metric_families

KEY = "test-key-123"
ALIAS = "smollm2"
CTX = 1024
QUESTION = "What is the capital of France?"


def fail(message):
    print(f"serve_test: FAIL: {message}", flush=True)
    raise SystemExit(1)


def check(condition, message):
    if not condition:
        fail(message)
    print(f"serve_test: ok: {message}", flush=True)


class Server:
    """An `amk serve` process on port 0; its stderr is collected on a thread."""

    def __init__(self, amk, model, *extra):
        self.args = [amk, "serve", model, "--device", "cpu", "--host", "127.0.0.1", "--port", "0", "--alias", ALIAS,
                     "--ctx", str(CTX), *extra]
        self.proc = subprocess.Popen(self.args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True)
        self.lines = []
        self.port = None
        got_port = threading.Event()

        def read():
            for line in self.proc.stderr:
                self.lines.append(line)
                m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
                if m:
                    self.port = int(m.group(1))
                    got_port.set()
            got_port.set()

        threading.Thread(target=read, daemon=True).start()
        if not got_port.wait(60) or self.port is None:
            self.kill()
            fail(f"the server printed no port within 60 s: {''.join(self.lines)}")
        self.base = f"http://127.0.0.1:{self.port}"

    def log(self):
        return "".join(self.lines)

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


def call(server, method, path, body=None, headers=None, timeout=120):
    """(status, headers, body text) over http.client."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=timeout)
    try:
        data = body if body is None or isinstance(body, (bytes, str)) else json.dumps(body)
        conn.request(method, path, body=data, headers=headers or {})
        r = conn.getresponse()
        return r.status, dict(r.getheaders()), r.read().decode("utf-8", "replace")
    finally:
        conn.close()


def curl(server, path, body=None, key=KEY):
    """(status, body) through curl."""
    cmd = ["curl", "-sS", "--max-time", "120", "-o", "-", "-w", "\n%{http_code}", server.base + path]
    if key:
        cmd += ["-H", f"Authorization: Bearer {key}"]
    if body is not None:
        cmd += ["-H", "Content-Type: application/json", "--data-binary", body if isinstance(body, str) else json.dumps(body)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=150).stdout
    text, _, status = out.rpartition("\n")
    return int(status), text


def amk_generate(amk, model, prompt, n, chat=True):
    cmd = [amk, "generate", model, "-p", prompt, "--temp", "0", "-n", str(n), "--json", "--device", "cpu"]
    if chat:
        cmd.append("--chat")
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        fail(f"amk generate failed: {out.stderr}")
    return json.loads(out.stdout)


def is_error_body(text, status, param=None):
    try:
        err = json.loads(text)["error"]
    except (ValueError, KeyError, TypeError):
        return False
    shape = set(err) == {"message", "type", "param", "code"} and isinstance(err["message"], str) and err["message"]
    return shape and (param is None or err["param"] == param)


def metrics(server):
    status, _, text = call(server, "GET", "/metrics")
    if status != 200:
        fail(f"/metrics answered {status}")
    families = {f.name: f for f in text_string_to_metric_families(text)}
    return families


def sample_value(families, family, sample_name, **labels):
    f = families.get(family)
    if f is None:
        return None
    for s in f.samples:
        if s.name == sample_name and all(s.labels.get(k) == v for k, v in labels.items()):
            return s.value
    return 0.0


def stream_then_disconnect(server, events_before_close):
    """Starts a long stream, reads a few events and closes the socket. Returns the events read."""
    body = json.dumps({"model": ALIAS, "messages": [{"role": "user", "content": "Write a very long story about a dragon."}],
                       "max_tokens": 400, "temperature": 0.9, "seed": 1, "stream": True})
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=60)
    request = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {KEY}\r\n"
               f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n{body}")
    sock.sendall(request.encode())
    got = b""
    deadline = time.time() + 60
    while got.count(b"data: ") < events_before_close and time.time() < deadline:
        chunk = sock.recv(4096)
        if not chunk:
            break
        got += chunk
    sock.close()
    return got.count(b"data: ")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--amk", required=True)
    ap.add_argument("--model", required=True)
    args = ap.parse_args()
    started = time.time()

    server = Server(args.amk, args.model, "--api-key", KEY)
    try:
        run_checks(args, server)
    except SystemExit:
        print(server.log(), flush=True)
        server.kill()
        raise
    except Exception as e:  # noqa: BLE001 - report anything, with the server's log
        print(server.log(), flush=True)
        server.kill()
        fail(f"{type(e).__name__}: {e}")
    print(f"serve_test: all checks passed in {time.time() - started:.1f} s", flush=True)


def run_checks(args, server):
    # /health: 503 while loading (when the poll is fast enough to see it), then 200.
    saw_loading = False
    deadline = time.time() + 120
    while True:
        status, _, body = call(server, "GET", "/health", timeout=10)
        if status == 503:
            saw_loading = saw_loading or json.loads(body).get("status") == "loading"
        if status == 200 or time.time() > deadline:
            break
        time.sleep(0.05)
    check(status == 200 and json.loads(body) == {"status": "ok"},
          f"/health is 200 once loaded (503 'loading' seen before: {saw_loading})")

    # Models, through curl and the client; 401 without the key or with a wrong one.
    status, body = curl(server, "/v1/models")
    check(status == 200 and [m["id"] for m in json.loads(body)["data"]] == [ALIAS], f"curl /v1/models lists {ALIAS}")
    status, body = curl(server, "/v1/models", key=None)
    check(status == 401 and is_error_body(body, 401), "no key: 401 with an OpenAI error body")
    client = openai.OpenAI(base_url=server.base + "/v1", api_key=KEY, max_retries=0, timeout=120)
    check([m.id for m in client.models.list().data] == [ALIAS], "openai: models.list()")
    try:
        openai.OpenAI(base_url=server.base + "/v1", api_key="wrong", max_retries=0, timeout=30).models.list()
        fail("a wrong key was accepted")
    except openai.AuthenticationError as e:
        check(e.status_code == 401, "openai: a wrong key raises AuthenticationError (401)")

    # A greedy chat: the text and usage of `amk generate --json` on the same prompt.
    ref = amk_generate(args.amk, args.model, QUESTION, 12)
    chat = client.chat.completions.create(model=ALIAS, messages=[{"role": "user", "content": QUESTION}],
                                          temperature=0, max_tokens=12)
    c = chat.choices[0]
    check(c.message.content == ref["text"] and c.message.role == "assistant",
          f"greedy chat text equals amk generate's: {c.message.content!r}")
    check(chat.usage.prompt_tokens == len(ref["prompt_ids"]) and chat.usage.completion_tokens == len(ref["ids"])
          and chat.usage.total_tokens == len(ref["prompt_ids"]) + len(ref["ids"]),
          f"usage equals amk generate's counts ({chat.usage.prompt_tokens} + {chat.usage.completion_tokens})")
    check(c.finish_reason == ref["finish_reason"] == "stop", "finish_reason 'stop' at the eos")
    again = client.chat.completions.create(model=ALIAS, messages=[{"role": "user", "content": QUESTION}],
                                           temperature=0, max_completion_tokens=12)
    check(again.choices[0].message.content == ref["text"], "the same answer again (KV cache reused across requests)")
    short = client.chat.completions.create(model=ALIAS, messages=[{"role": "user", "content": QUESTION}],
                                           temperature=0, max_completion_tokens=3)
    check(short.choices[0].finish_reason == "length" and short.usage.completion_tokens == 3,
          "max_completion_tokens=3: 3 tokens, finish_reason 'length'")

    # Completions: text prompt and token-id prompt, against amk generate without --chat.
    ref_text = amk_generate(args.amk, args.model, "The capital of France is", 8, chat=False)
    comp = client.completions.create(model=ALIAS, prompt="The capital of France is", temperature=0, max_tokens=8)
    check(comp.choices[0].text == ref_text["text"] and comp.usage.completion_tokens == len(ref_text["ids"]),
          f"greedy completion equals amk generate's: {comp.choices[0].text!r}")
    comp_ids = client.completions.create(model=ALIAS, prompt=ref_text["prompt_ids"], temperature=0, max_tokens=8)
    check(comp_ids.choices[0].text == ref_text["text"], "a prompt of token ids gives the same completion")

    # Streaming with usage: role first, deltas add up to the text, finish_reason last, then usage.
    chunks = list(client.chat.completions.create(model=ALIAS, messages=[{"role": "user", "content": QUESTION}],
                                                 temperature=0, max_tokens=12, stream=True,
                                                 stream_options={"include_usage": True}))
    check(chunks[0].choices[0].delta.role == "assistant", "stream: the role in the first delta")
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    check(text == ref["text"], "stream: the deltas add up to the greedy text")
    finish = [ch.choices[0].finish_reason for ch in chunks if ch.choices]
    check(finish[-1] == "stop" and all(f is None for f in finish[:-1]), "stream: finish_reason in the last choice chunk only")
    check(not chunks[-1].choices and chunks[-1].usage is not None
          and chunks[-1].usage.completion_tokens == len(ref["ids"]), "stream: a final usage chunk")
    check(all(ch.usage is None for ch in chunks[:-1]), "stream: usage null before it")
    plain = list(client.chat.completions.create(model=ALIAS, messages=[{"role": "user", "content": QUESTION}],
                                                temperature=0, max_tokens=12, stream=True))
    check(all(ch.usage is None for ch in plain) and plain[-1].choices[0].finish_reason == "stop",
          "stream without include_usage: no usage chunk")
    # The raw SSE through curl: data: lines and [DONE].
    status, body = curl(server, "/v1/completions", {"prompt": "The capital of France is", "max_tokens": 4,
                                                     "temperature": 0, "stream": True})
    events = [line for line in body.split("\n") if line]
    check(status == 200 and all(e.startswith("data: ") for e in events) and events[-1] == "data: [DONE]",
          "curl: a completion stream is SSE data: lines ending in [DONE]")

    # Stop strings: excluded from the text, held back while streaming.
    stopped = client.chat.completions.create(model=ALIAS, messages=[{"role": "user", "content": QUESTION}],
                                             temperature=0, max_tokens=12, stop="Paris")
    expected = ref["text"].split("Paris")[0]
    check(stopped.choices[0].message.content == expected and stopped.choices[0].finish_reason == "stop",
          f"stop='Paris': {stopped.choices[0].message.content!r}")
    chunks = list(client.chat.completions.create(model=ALIAS, messages=[{"role": "user", "content": QUESTION}],
                                                 temperature=0, max_tokens=12, stream=True,
                                                 stop=["France is", "nothing"]))
    deltas = [ch.choices[0].delta.content or "" for ch in chunks if ch.choices]
    check("".join(deltas) == ref["text"].split("France is")[0] and not any("France" in d for d in deltas),
          f"stream with a stop list: the stop string never appears ({deltas!r})")

    # Sampling: the same seed gives the same text; parameters are accepted.
    kwargs = dict(model=ALIAS, messages=[{"role": "user", "content": "Tell me a joke."}], temperature=0.9,
                  top_p=0.9, max_tokens=8, seed=42, extra_body={"top_k": 40, "min_p": 0.05})
    a = client.chat.completions.create(**kwargs).choices[0].message.content
    b = client.chat.completions.create(**kwargs).choices[0].message.content
    check(a == b, "a seeded sampled answer repeats")

    # Four concurrent clients, all answered in full, each as it is alone.
    prompts = ["Name a colour.", "Name a fruit.", "Name an animal.", "Name a country."]
    alone = {p: client.chat.completions.create(model=ALIAS, messages=[{"role": "user", "content": p}], temperature=0,
                                               max_tokens=8).choices[0].message.content for p in prompts}

    def ask(p):
        cl = openai.OpenAI(base_url=server.base + "/v1", api_key=KEY, max_retries=0, timeout=120)
        r = cl.chat.completions.create(model=ALIAS, messages=[{"role": "user", "content": p}], temperature=0, max_tokens=8)
        return p, r

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        results = list(pool.map(ask, prompts))
    check(all(r.choices[0].finish_reason in ("stop", "length") and r.choices[0].message.content == alone[p]
              and r.usage.completion_tokens >= 1 for p, r in results),
          "four concurrent clients: all answered in full, each as when alone")

    # Bad bodies: 400 with an OpenAI error body naming the field; the server stays up.
    bad = [({"messages": [{"role": "user", "content": "x"}], "n": 2}, "n"),
           ({"messages": [{"role": "user", "content": "x"}], "logprobs": True}, "logprobs"),
           ({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {"name": "f"}}]},
            "tools"),
           ({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_object"}}, "response_format"),
           ({"messages": [{"role": "user", "content": "x"}], "logit_bias": {"1": 3}}, "logit_bias"),
           ({"messages": [{"role": "user", "content": "x"}], "presence_penalty": 1}, "presence_penalty"),
           ({"messages": [{"role": "user", "content": "x"}], "max_tokens": CTX}, "max_tokens"),
           ({"messages": []}, "messages"),
           ({"messages": [{"role": "user", "content": "x"}], "temperature": -1}, "temperature")]
    for body, param in bad:
        status, text = curl(server, "/v1/chat/completions", body)
        check(status == 400 and is_error_body(text, 400, param), f"400 naming '{param}'")
    for raw in ["{", "", "[1,2]", '{"messages": [{"role": "user", "content": "x"}], "a": 1, "a": 2}', "\xff\xfe"]:
        status, text = curl(server, "/v1/chat/completions", raw)
        check(status == 400 and is_error_body(text, 400), f"400 for the malformed body {raw!r}")
    status, text = curl(server, "/v1/completions", {"prompt": [10 ** 9]})
    check(status == 400 and is_error_body(text, 400, "prompt"), "400 for a token id outside the vocabulary")
    try:
        client.chat.completions.create(model=ALIAS, messages=[{"role": "user", "content": "x"}], n=3)
        fail("n=3 was accepted")
    except openai.BadRequestError as e:
        check(e.status_code == 400 and e.body.get("param") == "n", "openai: n=3 raises BadRequestError naming 'n'")
    status, text = curl(server, "/nope")
    check(status == 404 and is_error_body(text, 404), "404 with an error body for an unknown path")

    # A client that disconnects mid-stream: its generation is cancelled, the server keeps working.
    before = metrics(server)
    cancelled_before = sample_value(before, "amk_requests", "amk_requests_total", endpoint="chat", outcome="cancelled")
    read = stream_then_disconnect(server, 3)
    check(read >= 3, f"a stream started ({read} events read) and the client closed it")
    deadline = time.time() + 30
    cancelled = cancelled_before
    while time.time() < deadline and cancelled <= cancelled_before:
        time.sleep(0.2)
        cancelled = sample_value(metrics(server), "amk_requests", "amk_requests_total", endpoint="chat",
                                 outcome="cancelled")
    check(cancelled == cancelled_before + 1, "the disconnected stream's generation was cancelled")
    after = client.chat.completions.create(model=ALIAS, messages=[{"role": "user", "content": QUESTION}],
                                           temperature=0, max_tokens=12)
    check(after.choices[0].message.content == ref["text"], "the server answers as before after the disconnect")

    # /metrics through prometheus_client.
    fam = metrics(server)
    ok_chat = sample_value(fam, "amk_requests", "amk_requests_total", endpoint="chat", outcome="ok")
    check(ok_chat >= 10, f"metrics: {ok_chat:.0f} chat requests ok")
    check(sample_value(fam, "amk_requests", "amk_requests_total", endpoint="chat", outcome="bad_request") >= 10,
          "metrics: the 400s are counted")
    check(sample_value(fam, "amk_requests", "amk_requests_total", endpoint="models", outcome="unauthorized") >= 1,
          "metrics: the 401s are counted")
    check(sample_value(fam, "amk_prompt_tokens", "amk_prompt_tokens_total") > 0
          and sample_value(fam, "amk_generated_tokens", "amk_generated_tokens_total") > 0, "metrics: token counters")
    ttft = sample_value(fam, "amk_time_to_first_token_seconds", "amk_time_to_first_token_seconds_count")
    itl = sample_value(fam, "amk_inter_token_latency_seconds", "amk_inter_token_latency_seconds_count")
    check(ttft >= ok_chat and itl > 0, f"metrics: TTFT ({ttft:.0f}) and inter-token ({itl:.0f}) histograms")
    check(fam["amk_time_to_first_token_seconds"].type == "histogram" and fam["amk_queue_depth"].type == "gauge"
          and sample_value(fam, "amk_queue_depth", "amk_queue_depth") == 0, "metrics: types, queue depth 0 when idle")

    # SIGTERM with a stream running: the server stops and exits 0.
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    conn.request("POST", "/v1/chat/completions",
                 body=json.dumps({"messages": [{"role": "user", "content": "Write a long story."}], "max_tokens": 400,
                                  "stream": True, "seed": 3}),
                 headers={"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"})
    resp = conn.getresponse()
    first = resp.readline()
    check(resp.status == 200 and first.startswith(b"data: "), "a long stream is running")
    t0 = time.time()
    server.proc.send_signal(signal.SIGTERM)
    try:
        code = server.proc.wait(30)
    except subprocess.TimeoutExpired:
        fail("the server did not exit within 30 s of SIGTERM")
    rest = b""
    try:
        rest = resp.read()
    except (http.client.HTTPException, OSError):
        pass
    conn.close()
    check(code == 0, f"SIGTERM: exit 0 after {time.time() - t0:.1f} s")
    check(b"[DONE]" not in rest or b"shutting down" in rest, "the running stream ended with an error, not a fake finish")

    # A second server with a queue of 1: the third concurrent request gets 503 with Retry-After.
    small = Server(args.amk, args.model, "--max-queue", "1", "--quiet")
    try:
        deadline = time.time() + 120
        while call(small, "GET", "/health", timeout=10)[0] != 200 and time.time() < deadline:
            time.sleep(0.1)
        # Counting goes on without an eos: each request runs its 150 tokens (seconds on the CPU).
        body = {"prompt": "1, 2, 3, 4, 5, 6, 7,", "max_tokens": 150, "temperature": 0}

        def post(_):
            return call(small, "POST", "/v1/completions", body, {"Content-Type": "application/json"})

        # One runs (seen in the metrics), then three more arrive: one waits, two find the queue full.
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            running = pool.submit(post, 0)
            deadline = time.time() + 60
            while sample_value(metrics(small), "amk_requests_running", "amk_requests_running") != 1:
                if time.time() > deadline or running.done():
                    fail("the first request was not seen running")
                time.sleep(0.02)
            others = [pool.submit(post, i) for i in range(3)]
            answers = [running.result()] + [f.result() for f in others]
        statuses = sorted(a[0] for a in answers)
        full = [a for a in answers if a[0] == 503]
        check(statuses == [200, 200, 503, 503] and all(a[1].get("Retry-After") == "1" and is_error_body(a[2], 503)
                                                       for a in full),
              f"--max-queue 1: statuses {statuses}, the 503s with Retry-After")
        small.proc.send_signal(signal.SIGTERM)
        check(small.proc.wait(30) == 0, "the second server exits 0 on SIGTERM")
    finally:
        small.kill()


if __name__ == "__main__":
    main()
