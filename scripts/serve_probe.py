#!/usr/bin/env python3
"""Starts `amk serve MODEL --device DEVICE` on a free loopback port and measures what a client
sees, with the standard library only (the GPU machine has no `openai` package): a greedy chat
(non-streamed: its text and usage), then N streamed chats (time to the first content chunk and
tokens/s after it, from usage). Prints one JSON object; exits 1 when an answer is incomplete.

  scripts/serve_probe.py --amk .gpu/amk --model SmolLM2.gguf [--device cuda] [--streams 5]
"""
import argparse
import http.client
import json
import socket
import subprocess
import sys
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def request(port, path, body=None, timeout=60):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    conn.request("POST" if body is not None else "GET", path,
                 body=json.dumps(body) if body is not None else None,
                 headers={"Content-Type": "application/json"})
    return conn, conn.getresponse()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--amk", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--streams", type=int, default=5)
    ap.add_argument("--max-tokens", type=int, default=64)
    a = ap.parse_args()
    port = free_port()
    server = subprocess.Popen([a.amk, "serve", a.model, "--port", str(port), "--device", a.device],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    out = {"device": a.device, "port": port}
    ok = True
    try:
        deadline = time.time() + 120
        while True:
            try:
                _, r = request(port, "/health", timeout=2)
                if r.status == 200:
                    break
            except OSError:
                pass
            if time.time() > deadline or server.poll() is not None:
                raise SystemExit("the server did not become healthy: " + (server.stderr.read() if server.poll() is not None else "timeout"))
            time.sleep(0.2)
        question = {"model": "x", "messages": [{"role": "user", "content": "What is the capital of France?"}],
                    "temperature": 0, "max_tokens": 32}
        _, r = request(port, "/v1/chat/completions", question)
        greedy = json.loads(r.read())
        out["greedy_text"] = greedy["choices"][0]["message"]["content"]
        out["greedy_usage"] = greedy["usage"]
        ok &= out["greedy_text"] == "The capital of France is Paris."
        ttft, rates = [], []
        for i in range(a.streams):
            body = {"model": "x", "messages": [{"role": "user", "content": "Write a short poem about the sea."}],
                    "temperature": 0.8, "top_p": 0.9, "seed": i, "max_tokens": a.max_tokens, "stream": True,
                    "stream_options": {"include_usage": True}}
            t0 = time.perf_counter()
            _, r = request(port, "/v1/chat/completions", body)
            first = None
            usage = None
            done = False
            for raw in r:
                line = raw.decode().strip()
                if not line.startswith("data: "):
                    continue
                data = line[6:]
                if data == "[DONE]":
                    done = True
                    break
                chunk = json.loads(data)
                if chunk.get("usage"):
                    usage = chunk["usage"]
                for c in chunk.get("choices", []):
                    if c.get("delta", {}).get("content") and first is None:
                        first = time.perf_counter()
            t1 = time.perf_counter()
            ok &= done and usage is not None and first is not None
            if first is not None and usage:
                ttft.append(first - t0)
                if usage["completion_tokens"] > 1 and t1 > first:
                    rates.append((usage["completion_tokens"] - 1) / (t1 - first))
        out["streams"] = a.streams
        out["ttft_s_median"] = sorted(ttft)[len(ttft) // 2] if ttft else None
        out["tokens_per_s_median"] = sorted(rates)[len(rates) // 2] if rates else None
    finally:
        server.terminate()
        try:
            out["exit_on_sigterm"] = server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            server.kill()
            out["exit_on_sigterm"] = "killed"
    ok &= out.get("exit_on_sigterm") == 0
    out["ok"] = bool(ok)
    print(json.dumps(out))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
