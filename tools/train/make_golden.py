#!/usr/bin/python3
"""Writes the peer's golden outputs for the trained model (models/strata-moe-tiny/golden/).

Per prompt (golden/prompts.txt, one per line): the prompt's ids (strata tokenize; the same ids the
training script's encoder gives), a greedy continuation of --n tokens, then llama.cpp evaluates
prompt + continuation (minus its last token) in ONE batch through llama_tensor_dump (n_batch 256,
2 threads, F32 K/V, no flash attention): the golden holds, per position, the top-20 [id, logit]
and, for the last prompt position, the full row (p<i>.last_logits.f32). The continuation is
llama.cpp's own greedy: every continuation token is checked to be llama.cpp's argmax at the
position before it.

  tools/train/make_golden.py MODEL.gguf OUTDIR [--strata build/bin/strata] [--peer /tmp/strata-peer/llama_tensor_dump]
"""
import argparse, json, os, subprocess, tempfile

import numpy as np


def main():
    p = argparse.ArgumentParser()
    p.add_argument("model")
    p.add_argument("outdir")
    p.add_argument("--strata", default="build/bin/strata")
    p.add_argument("--peer", default=os.path.join(os.environ.get("PEER_DIR", "/tmp/strata-peer"), "llama_tensor_dump"))
    p.add_argument("--n", type=int, default=24)
    p.add_argument("--topk", type=int, default=20)
    a = p.parse_args()
    prompts = [l.rstrip("\n") for l in open(os.path.join(a.outdir, "prompts.txt")) if l.strip()]
    for i, text in enumerate(prompts):
        ids = json.loads(subprocess.run([a.strata, "tokenize", "-m", a.model, "-p", text, "--json"], capture_output=True, text=True,
                                        check=True).stdout)["ids"]
        with tempfile.TemporaryDirectory() as td:
            tf = os.path.join(td, "ids.txt")
            open(tf, "w").write(" ".join(map(str, ids)))
            out = subprocess.run([a.strata, "run", "-m", a.model, "--tokens-file", tf, "-n", str(a.n), "--temp", "0", "--ignore-eos", "--json",
                                  "-c", "256", "--cache-type-k", "f32", "--cache-type-v", "f32"],
                                 capture_output=True, text=True, check=True).stdout
            gen = json.loads(out.strip().splitlines()[-1])["tokens"]
            seq = ids + gen[:-1]
            subprocess.run([a.peer, "--model", a.model, "--tokens", ",".join(map(str, seq)), "--out", td, "--filter", "result_output"],
                           capture_output=True, check=True)
            logits = np.fromfile(os.path.join(td, "result_output.f32"), dtype=np.float32).reshape(len(seq), -1)
        n_prompt = len(ids)
        for s in range(len(gen)):
            row = logits[n_prompt - 1 + s]
            if int(row.argmax()) != gen[s]:
                raise SystemExit(f"prompt {i}: step {s}: llama.cpp's argmax {int(row.argmax())} != greedy token {gen[s]}")
        topk = []
        for row in logits:
            order = np.argsort(-row, kind="stable")[: a.topk]
            topk.append([[int(t), float(row[t])] for t in order])
        margins = [float(np.sort(r)[-1] - np.sort(r)[-2]) for r in logits[n_prompt - 1:]]
        j = {"prompt": text, "prompt_tokens": ids, "tokens": seq, "n_prompt": n_prompt, "greedy_tokens": gen,
             "greedy_min_margin": min(margins), "topk": topk,
             "settings": {"engine": "llama.cpp v0.5.0 (peer, llama_tensor_dump)", "n_batch": 256, "n_threads": 2, "kv_type": "f32",
                          "flash_attn": False, "one_batch": True}}
        json.dump(j, open(os.path.join(a.outdir, f"p{i}.json"), "w"), indent=None, separators=(",", ":"))
        logits[n_prompt - 1].astype("<f4").tofile(os.path.join(a.outdir, f"p{i}.last_logits.f32"))
        print(f"p{i}: {n_prompt} prompt tokens + {len(gen)} greedy, min margin {min(margins):.4f}")


if __name__ == "__main__":
    main()
