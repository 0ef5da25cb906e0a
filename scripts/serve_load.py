#!/usr/bin/env python3
"""A load run of `amk serve`: N requests from C concurrent `openai` clients on loopback with the
server's default queue. Every request must get a complete answer (finish_reason stop or length,
usage present) and no 503; the server's resident memory (VmRSS) is read after the first 50
requests and after all of them. Prints one JSON object with the numbers (docs/SERVER.md).

  scripts/serve_load.py --amk build/amk --model SmolLM2-135M-Instruct.Q4_1.gguf [--requests 200]
      [--clients 8] [--max-tokens 12] [--device cpu]

Use scripts/pyenv.sh's python (it has `openai` and `prometheus_client`).
"""
import argparse
import concurrent.futures
import json
import re
import signal
import statistics
import subprocess
import threading
import time
import urllib.request

import openai
from prometheus_client.parser import text_string_to_metric_families

TOPICS = ["the sea", "a cat", "Paris", "winter", "a robot", "music", "the moon", "bread", "rain", "a library",
          "chess", "a volcano", "tea", "a train", "honey", "a forest"]


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return -1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--amk", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=12)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--ctx", type=int, default=1024)
    args = ap.parse_args()

    proc = subprocess.Popen([args.amk, "serve", args.model, "--device", args.device, "--port", "0", "--alias", "m",
                             "--ctx", str(args.ctx), "--quiet"],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    port = None
    got = threading.Event()
    log = []

    def read():
        nonlocal port
        for line in proc.stderr:
            log.append(line)
            m = re.search(r"listening on http://[^:]+:(\d+)", line)
            if m:
                port = int(m.group(1))
                got.set()
        got.set()

    threading.Thread(target=read, daemon=True).start()
    if not got.wait(60) or port is None:
        proc.kill()
        raise SystemExit("no port: " + "".join(log))
    base = f"http://127.0.0.1:{port}"
    deadline = time.time() + 300
    while time.time() < deadline:
        try:
            if urllib.request.urlopen(base + "/health", timeout=5).status == 200:
                break
        except Exception:  # noqa: BLE001 - 503 while loading
            time.sleep(0.1)
    rss_loaded = rss_kb(proc.pid)

    lock = threading.Lock()
    done = 0
    rss_at_50 = None
    failures = []
    latencies = []
    tokens = 0
    next_index = 0

    def client_loop(worker):
        nonlocal done, rss_at_50, next_index, tokens
        client = openai.OpenAI(base_url=base + "/v1", api_key="none", max_retries=0, timeout=600)
        while True:
            with lock:
                if next_index >= args.requests:
                    return
                i = next_index
                next_index += 1
            topic = TOPICS[i % len(TOPICS)]
            t0 = time.time()
            try:
                if i % 4 == 3:  # a quarter as streams with usage
                    chunks = list(client.chat.completions.create(
                        model="m", messages=[{"role": "user", "content": f"Say something about {topic}."}],
                        max_tokens=args.max_tokens, temperature=0.7, seed=i, stream=True,
                        stream_options={"include_usage": True}))
                    finish = [c.choices[0].finish_reason for c in chunks if c.choices][-1]
                    usage = chunks[-1].usage
                    ok = finish in ("stop", "length") and usage is not None and usage.completion_tokens >= 1
                    n = usage.completion_tokens if usage else 0
                else:
                    r = client.chat.completions.create(
                        model="m", messages=[{"role": "user", "content": f"Say something about {topic}."}],
                        max_tokens=args.max_tokens, temperature=0.7, seed=i)
                    ok = r.choices[0].finish_reason in ("stop", "length") and r.usage.completion_tokens >= 1
                    n = r.usage.completion_tokens
                if not ok:
                    raise RuntimeError(f"incomplete answer to request {i}")
            except Exception as e:  # noqa: BLE001 - every failure is counted and reported
                with lock:
                    failures.append(f"{i}: {type(e).__name__}: {e}")
                n = 0
            with lock:
                latencies.append(time.time() - t0)
                tokens += n
                done += 1
                if done == 50:
                    rss_at_50 = rss_kb(proc.pid)

    t_start = time.time()
    with concurrent.futures.ThreadPoolExecutor(args.clients) as pool:
        list(pool.map(client_loop, range(args.clients)))
    wall = time.time() - t_start
    rss_at_end = rss_kb(proc.pid)
    with urllib.request.urlopen(base + "/metrics", timeout=10) as r:
        fams = {f.name: f for f in text_string_to_metric_families(r.read().decode())}

    def value(family, sample, **labels):
        return sum(s.value for s in fams[family].samples
                   if s.name == sample and all(s.labels.get(k) == v for k, v in labels.items()))

    proc.send_signal(signal.SIGTERM)
    code = proc.wait(60)
    ttft_n = value("amk_time_to_first_token_seconds", "amk_time_to_first_token_seconds_count")
    itl_n = value("amk_inter_token_latency_seconds", "amk_inter_token_latency_seconds_count")
    result = {
        "requests": args.requests, "clients": args.clients, "max_tokens": args.max_tokens, "device": args.device,
        "completed": done - len(failures), "failures": len(failures), "failure_examples": failures[:5],
        "rejected_503": value("amk_requests", "amk_requests_total", outcome="rejected"),
        "ok_by_server": value("amk_requests", "amk_requests_total", outcome="ok"),
        "generated_tokens": tokens, "wall_s": round(wall, 1), "requests_per_s": round(done / wall, 2),
        "tokens_per_s": round(tokens / wall, 1),
        "latency_s": {"median": round(statistics.median(latencies), 2),
                      "p95": round(sorted(latencies)[int(0.95 * (len(latencies) - 1))], 2),
                      "max": round(max(latencies), 2)},
        "mean_ttft_s": round(value("amk_time_to_first_token_seconds", "amk_time_to_first_token_seconds_sum") / ttft_n, 3)
        if ttft_n else None,
        "mean_inter_token_s": round(value("amk_inter_token_latency_seconds", "amk_inter_token_latency_seconds_sum") / itl_n, 4)
        if itl_n else None,
        "rss_mb": {"loaded": round(rss_loaded / 1024, 1), "after_50": round((rss_at_50 or -1) / 1024, 1),
                   "after_all": round(rss_at_end / 1024, 1),
                   "growth_50_to_all": round((rss_at_end - (rss_at_50 or 0)) / 1024, 1)},
        "exit_code_after_sigterm": code,
    }
    print(json.dumps(result, indent=2))
    good = (not failures and result["rejected_503"] == 0 and result["rss_mb"]["growth_50_to_all"] <= 20 and code == 0)
    raise SystemExit(0 if good else 1)


if __name__ == "__main__":
    main()
