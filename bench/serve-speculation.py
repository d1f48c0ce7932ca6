#!/usr/bin/env python3
# Server speculation benchmark: S concurrent /v1/completions requests against a running
# `strata serve --draft lookup` (on the edit prompt: output that repeats its input), alternating
# speculation off (speculative.n_max 0) and on (the server default) in the same server (off on, on off, ...), printing
# aggregate tok/s, passes, drafts and expert bytes read per token per round, then the medians.
# Each request has its own seed (1..S, the same in both modes): with one seed for all, plain
# sampling would run S copies of one stream, which share every expert read, while speculation's
# streams diverge (drafts consume random numbers), so the modes would not do the same work.
# Usage: bench/serve-speculation.py PORT S TOKENS ROUNDS TEMP
import json, sys, time, threading, urllib.request
port, S, N, R, T = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
edit = ("And God said unto Moses, I will be not done, and I will be done, and I will be done, and I will be done, and I will be done. "
        "And I will say unto you, I will not be done, and I will be done, and I will be done,")
base = f"http://127.0.0.1:{port}"
def metrics():
    t = urllib.request.urlopen(base + "/metrics").read().decode()
    return {l.split()[0]: float(l.split()[1]) for l in t.splitlines() if l and not l.startswith("#") and "{" not in l}
def one(body, out, i):
    body = dict(body, seed=1 + i)
    req = urllib.request.Request(base + "/v1/completions", json.dumps(body).encode(), {"Content-Type": "application/json"})
    out[i] = json.loads(urllib.request.urlopen(req).read())
res = {"off": [], "on": []}
for r in range(R):
    for mode in (("off", "on") if r % 2 == 0 else ("on", "off")):  # A B, B A: a drifting machine favours neither
        body = {"prompt": edit, "max_tokens": N, "ignore_eos": True, "temperature": T, "seed": 1}
        if mode == "off": body["speculative.n_max"] = 0
        m0 = metrics(); outs = [None] * S
        th = [threading.Thread(target=one, args=(body, outs, i)) for i in range(S)]
        t0 = time.time(); [t.start() for t in th]; [t.join() for t in th]; dt = time.time() - t0
        m1 = metrics(); d = {k: m1[k] - m0.get(k, 0) for k in m1}
        toks = sum(o["usage"]["completion_tokens"] for o in outs)
        texts = [o["choices"][0]["text"] for o in outs]
        res[mode].append((toks / dt, d, texts))
        print(f"round {r} {mode:3}: {toks/dt:7.1f} tok/s  passes {d['strata_engine_steps_total']:.0f}  drafts {d['strata_draft_tokens_total']:.0f} "
              f"accepted {d['strata_draft_tokens_accepted_total']:.0f}  expert bytes read/token {d['strata_expert_bytes_read_total']/max(1,toks)/1024:.0f} KiB  "
              f"distinct texts {len(set(texts))}", flush=True)
on = sorted(x[0] for x in res["on"]); off = sorted(x[0] for x in res["off"])
print(f"median tok/s: off {off[len(off)//2]:.1f}, on {on[len(on)//2]:.1f}, ratio {on[len(on)//2]/off[len(off)//2]:.2f}")
if T == 0: print("greedy texts equal on/off:", all(a[2] == b[2] for a, b in zip(res["on"], res["off"])))
