#!/usr/bin/python3
"""Trains Strata's small demo model: a qwen3moe-architecture MoE on English text from Debian packages.

Everything here is computed the way llama.cpp and Strata compute a qwen3moe forward pass (RMSNorm
eps 1e-6, per-head q/k RMSNorm, NeoX RoPE, GQA, softmax router with top-k weights renormalized to
sum 1, SwiGLU experts), so the exported GGUF gives the trained function exactly up to quantization.

Steps (each can be run alone; outputs go under --work):
  corpus   bible-kjv (through the `bible` program) + fortunes -> documents, 2% held out
  bpe      byte-level BPE (qwen2 pre-tokenizer regex), 256 byte tokens + merges + control tokens
  vocab    instead of bpe: the tokenizer of --vocab-from GGUF (the draft model shares the MoE's vocabulary)
  train    AdamW, time-budgeted cosine schedule, auxiliary load-balancing loss, checkpoints
  export   raw f32 tensors + manifest.json (GGUF names, ggml ne order) for strata-export-gguf

Needs: python3-torch, python3-regex, bible-kjv, fortunes (Debian packages).
"""
import argparse, collections, glob, hashlib, json, math, os, random, re as _re, subprocess, sys, time

import regex

# llama.cpp's regex for tokenizer.ggml.pre = "qwen2" (the same string as Strata's kRegexQwen2).
QWEN2_RE = regex.compile(
    r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def log(*a):
    print(time.strftime("%H:%M:%S"), *a, flush=True)


# ---------------------------------------------------------------- corpus
def bible_documents():
    """One document per chapter of the KJV, through the `bible` program (bible-kjv)."""
    out = subprocess.run(["bible", "-f", "Gen1:1-Rev22:21"], capture_output=True, text=True, check=True).stdout
    docs, cur, cur_key = [], [], None
    for line in out.splitlines():
        m = _re.match(r"^\s*(\d?\s?[A-Za-z]+)(\d+):(\d+)\s*(.*)$", line)
        if m:
            key = (m.group(1), m.group(2))
            if key != cur_key and cur:
                docs.append(" ".join(cur))
                cur = []
            cur_key = key
            cur.append(m.group(4).strip())
        elif line.strip() and cur:
            cur[-1] += " " + line.strip()
    if cur:
        docs.append(" ".join(cur))
    return [d for d in docs if d.strip()]


def fortune_documents():
    docs = []
    for f in sorted(glob.glob("/usr/share/games/fortunes/*")):
        if f.endswith((".dat", ".u8")) or os.path.islink(f) or os.path.isdir(f):
            continue
        with open(f, encoding="utf-8", errors="replace") as fh:
            for entry in fh.read().split("\n%\n"):
                e = entry.strip("\n%")
                if e.strip():
                    docs.append(e.rstrip() + "\n")
    return docs


def held_out(doc):
    return int(hashlib.sha1(doc.encode()).hexdigest(), 16) % 100 < 2


def cmd_corpus(a):
    bible, fort = bible_documents(), fortune_documents()
    train, test = [], []
    for d in bible + fort:
        (test if held_out(d) else train).append(d)
    json.dump({"train": train, "test": test}, open(os.path.join(a.work, "corpus.json"), "w"))
    nb = lambda ds: sum(len(d.encode()) for d in ds)
    log(f"corpus: bible {len(bible)} chapters {nb(bible)/1e6:.2f} MB, fortunes {len(fort)} entries {nb(fort)/1e6:.2f} MB; "
        f"train {len(train)} docs {nb(train)/1e6:.2f} MB, held out {len(test)} docs {nb(test)/1e6:.2f} MB")


# ---------------------------------------------------------------- BPE
def bytes_to_unicode():
    """GPT-2's byte -> printable codepoint map (what llama.cpp's gpt2 vocab stores)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, [chr(c) for c in cs]))


B2U = bytes_to_unicode()


def pretokenize(text):
    return QWEN2_RE.findall(text)


def cmd_bpe(a):
    corpus = json.load(open(os.path.join(a.work, "corpus.json")))
    counts = collections.Counter()
    for d in corpus["train"]:
        counts.update(pretokenize(d))
    words = [[B2U[b] for b in w.encode()] for w in counts]
    freq = [counts[w] for w in counts]
    pair_count = collections.Counter()
    where = collections.defaultdict(set)
    for i, w in enumerate(words):
        for p in zip(w, w[1:]):
            pair_count[p] += freq[i]
            where[p].add(i)
    vocab = [B2U[b] for b in range(256)]
    merges = []
    n_merges = a.vocab - 256 - len(SPECIALS)
    t0 = time.time()
    while len(merges) < n_merges and pair_count:
        # most frequent pair; ties broken by the pair itself so the result is deterministic
        best = max(pair_count.items(), key=lambda kv: (kv[1], kv[0]))[0]
        if pair_count[best] < 2:
            break
        merges.append(best)
        new = best[0] + best[1]
        vocab.append(new)
        for i in list(where[best]):
            w, f = words[i], freq[i]
            for p in zip(w, w[1:]):
                pair_count[p] -= f
                if pair_count[p] <= 0:
                    del pair_count[p]
            nw, j = [], 0
            while j < len(w):
                if j + 1 < len(w) and w[j] == best[0] and w[j + 1] == best[1]:
                    nw.append(new)
                    j += 2
                else:
                    nw.append(w[j])
                    j += 1
            words[i] = nw
            for p in zip(nw, nw[1:]):
                pair_count[p] += f
                where[p].add(i)
        del where[best]
    tokens = vocab + SPECIALS
    types = [1] * len(vocab) + [3] * len(SPECIALS)
    json.dump({"tokens": tokens, "types": types, "merges": [f"{l} {r}" for l, r in merges]},
              open(os.path.join(a.work, "vocab.json"), "w"), ensure_ascii=False)
    log(f"bpe: {len(tokens)} tokens ({len(merges)} merges) from {len(counts)} distinct words in {time.time()-t0:.1f} s")


def gguf_metadata(path):
    """The metadata of a GGUF file (a minimal reader: enough for the tokenizer's arrays)."""
    import struct
    f = open(path, "rb")
    magic, _ver, _n_tensors, n_kv = struct.unpack("<IIQQ", f.read(24))
    if magic != 0x46554747:
        raise SystemExit(f"{path}: not a GGUF file")
    scalar = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}

    def string():
        n, = struct.unpack("<Q", f.read(8))
        return f.read(n).decode("utf-8")

    def value(t):
        if t == 8:
            return string()
        if t == 9:
            et, n = struct.unpack("<IQ", f.read(12))
            return [value(et) for _ in range(n)]
        fmt = scalar[t]
        return struct.unpack(fmt, f.read(struct.calcsize(fmt)))[0]

    kv = {}
    for _ in range(n_kv):
        k = string()
        t, = struct.unpack("<I", f.read(4))
        kv[k] = value(t)
    return kv


def cmd_vocab(a):
    """The tokenizer of an existing GGUF (--vocab-from): a draft model must share its target's vocabulary."""
    if not a.vocab_from:
        raise SystemExit("vocab: give --vocab-from GGUF")
    kv = gguf_metadata(a.vocab_from)
    v = {"tokens": kv["tokenizer.ggml.tokens"], "types": kv["tokenizer.ggml.token_type"], "merges": kv["tokenizer.ggml.merges"]}
    json.dump(v, open(os.path.join(a.work, "vocab.json"), "w"), ensure_ascii=False)
    log(f"vocab: {len(v['tokens'])} tokens, {len(v['merges'])} merges from {a.vocab_from}")


class Encoder:
    def __init__(self, vocab):
        self.id = {t: i for i, t in enumerate(vocab["tokens"])}
        self.rank = {tuple(m.split(" ")): r for r, m in enumerate(vocab["merges"])}
        self.cache = {}
        self.tokens = vocab["tokens"]

    def word(self, w):
        c = self.cache.get(w)
        if c is not None:
            return c
        sym = [B2U[b] for b in w.encode()]
        while len(sym) > 1:
            best, bi = None, -1
            for i in range(len(sym) - 1):
                r = self.rank.get((sym[i], sym[i + 1]))
                if r is not None and (best is None or r < best):
                    best, bi = r, i
            if best is None:
                break
            sym = sym[:bi] + [sym[bi] + sym[bi + 1]] + sym[bi + 2:]
        ids = [self.id[s] for s in sym]
        self.cache[w] = ids
        return ids

    def encode(self, text):
        out = []
        for w in pretokenize(text):
            out.extend(self.word(w))
        return out

    def decode(self, ids):
        inv = {v: k for k, v in B2U.items()}
        toks = [t for t in (self.tokens[i] for i in ids)]
        return bytes(inv[c] for t in toks for c in t if c in inv).decode("utf-8", errors="replace")


def encode_docs(enc, docs, eot):
    ids = []
    for d in docs:
        ids.extend(enc.encode(d))
        ids.append(eot)
    return ids


def load_data(a):
    import torch
    path = os.path.join(a.work, "tokens.pt")
    vocab = json.load(open(os.path.join(a.work, "vocab.json")))
    if os.path.exists(path):
        return vocab, torch.load(path)
    corpus = json.load(open(os.path.join(a.work, "corpus.json")))
    enc = Encoder(vocab)
    eot = vocab["tokens"].index("<|endoftext|>")
    rnd = random.Random(1)
    train_docs = corpus["train"][:]
    rnd.shuffle(train_docs)
    d = {"train": torch.tensor(encode_docs(enc, train_docs, eot), dtype=torch.int32),
         "test": torch.tensor(encode_docs(enc, corpus["test"], eot), dtype=torch.int32)}
    torch.save(d, path)
    log(f"tokens: train {len(d['train'])}, held out {len(d['test'])}")
    return vocab, d


# ---------------------------------------------------------------- model
def build_model(cfg):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    eps = cfg["rms_eps"]

    def rms(x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w

    class Layer(nn.Module):
        def __init__(s):
            super().__init__()
            d, H, Hk, hd, E, ff = cfg["d"], cfg["n_head"], cfg["n_head_kv"], cfg["head_dim"], cfg["n_expert"], cfg["n_ff_exp"]
            std, ostd = 0.02, 0.02 / math.sqrt(2 * cfg["n_layer"])
            s.attn_norm = nn.Parameter(torch.ones(d))
            s.wq = nn.Parameter(torch.randn(H * hd, d) * std)
            s.wk = nn.Parameter(torch.randn(Hk * hd, d) * std)
            s.wv = nn.Parameter(torch.randn(Hk * hd, d) * std)
            s.wo = nn.Parameter(torch.randn(d, H * hd) * ostd)
            s.q_norm = nn.Parameter(torch.ones(hd))
            s.k_norm = nn.Parameter(torch.ones(hd))
            s.ffn_norm = nn.Parameter(torch.ones(d))
            if E == 0:  # dense qwen3 (the draft model): one SwiGLU FFN of width ff
                s.gate = nn.Parameter(torch.randn(ff, d) * std)
                s.up = nn.Parameter(torch.randn(ff, d) * std)
                s.down = nn.Parameter(torch.randn(d, ff) * ostd)
                return
            s.router = nn.Parameter(torch.randn(E, d) * std)
            s.gate = nn.Parameter(torch.randn(E, ff, d) * std)
            s.up = nn.Parameter(torch.randn(E, ff, d) * std)
            s.down = nn.Parameter(torch.randn(E, d, ff) * ostd)

        def forward(s, x, cos, sin):
            B, T, d = x.shape
            H, Hk, hd, E, k = cfg["n_head"], cfg["n_head_kv"], cfg["head_dim"], cfg["n_expert"], cfg["n_expert_used"]
            h = rms(x, s.attn_norm)
            q = (h @ s.wq.t()).view(B, T, H, hd)
            kk = (h @ s.wk.t()).view(B, T, Hk, hd)
            v = (h @ s.wv.t()).view(B, T, Hk, hd)
            q, kk = rms(q, s.q_norm), rms(kk, s.k_norm)

            def rope(t):  # NeoX: pairs (i, i + hd/2)
                t1, t2 = t[..., : hd // 2], t[..., hd // 2:]
                return torch.cat([t1 * cos - t2 * sin, t2 * cos + t1 * sin], -1)

            q, kk = rope(q), rope(kk)
            rep = H // Hk
            kk = kk.repeat_interleave(rep, dim=2)  # q head h uses kv head h / rep (ggml broadcast)
            v = v.repeat_interleave(rep, dim=2)
            q, kk, v = q.transpose(1, 2), kk.transpose(1, 2), v.transpose(1, 2)
            att = (q @ kk.transpose(-1, -2)) * (1.0 / math.sqrt(hd))
            mask = torch.ones(T, T, dtype=torch.bool).triu(1)
            att = att.masked_fill(mask, float("-inf")).softmax(-1)
            o = (att @ v).transpose(1, 2).reshape(B, T, H * hd)
            x = x + o @ s.wo.t()

            h = rms(x, s.ffn_norm).reshape(B * T, d)
            if E == 0:
                y = (F.silu(h @ s.gate.t()) * (h @ s.up.t())) @ s.down.t()
                return x + y.view(B, T, d), torch.zeros(()), [B * T * k]
            probs = (h @ s.router.t()).softmax(-1)
            w, idx = probs.topk(k, dim=-1)
            w = w / w.sum(-1, keepdim=True)
            # auxiliary load balancing (Switch): E * sum_e frac_routed_e * mean_prob_e
            frac = torch.bincount(idx.reshape(-1), minlength=E).float() / (B * T * k)
            aux = E * (frac * probs.mean(0)).sum()
            flat_e = idx.reshape(-1)
            order = flat_e.argsort()
            tok = order // k
            counts = torch.bincount(flat_e, minlength=E).tolist()
            wsorted = w.reshape(-1)[order]
            out = torch.zeros_like(h)
            # unbind once: indexing a parameter per expert would make every backward step write a
            # full-size gradient tensor per expert
            gates, ups, downs = s.gate.unbind(0), s.up.unbind(0), s.down.unbind(0)
            start = 0
            for e in range(E):
                n = counts[e]
                if n == 0:
                    continue
                ti = tok[start:start + n]
                he = h[ti]
                y = (F.silu(he @ gates[e].t()) * (he @ ups[e].t())) @ downs[e].t()
                out.index_add_(0, ti, y * wsorted[start:start + n, None])
                start += n
            x = x + out.view(B, T, d)
            return x, aux, counts

    class Model(nn.Module):
        def __init__(s):
            super().__init__()
            s.embd = nn.Parameter(torch.randn(cfg["vocab"], cfg["d"]) * 0.02)
            s.layers = nn.ModuleList([Layer() for _ in range(cfg["n_layer"])])
            s.out_norm = nn.Parameter(torch.ones(cfg["d"]))
            s.out = nn.Parameter(torch.randn(cfg["vocab"], cfg["d"]) * 0.02)

        def forward(s, ids):
            T = ids.shape[1]
            hd = cfg["head_dim"]
            inv = cfg["rope_base"] ** (-torch.arange(0, hd // 2, dtype=torch.float64) * 2.0 / hd)
            ang = torch.arange(T, dtype=torch.float64)[:, None] * inv[None, :]
            cos, sin = ang.cos().float()[None, :, None, :], ang.sin().float()[None, :, None, :]
            x = s.embd[ids]
            aux, loads = 0.0, []
            for l in s.layers:
                x, a_, c = l(x, cos, sin)
                aux = aux + a_
                loads.append(c)
            return rms(x, s.out_norm) @ s.out.t(), aux / len(s.layers), loads

    return Model()


def default_cfg(a, n_vocab):
    return {"vocab": n_vocab, "d": a.d, "n_layer": a.layers, "n_head": a.heads, "n_head_kv": a.heads_kv, "head_dim": a.d // a.heads,
            "n_expert": a.experts, "n_expert_used": a.top_k, "n_ff_exp": a.ff, "rope_base": 10000.0, "rms_eps": 1e-6,
            "ctx": a.ctx}


def evaluate(model, data, ctx, max_tokens=None):
    import torch
    import torch.nn.functional as F
    ids = data if max_tokens is None else data[: max_tokens + 1]
    n = (len(ids) - 1) // ctx
    tot, cnt = 0.0, 0
    with torch.no_grad():
        for i in range(0, n, 8):
            xs = torch.stack([ids[j * ctx: j * ctx + ctx + 1].long() for j in range(i, min(n, i + 8))])
            logits, _, _ = model(xs[:, :-1])
            tot += F.cross_entropy(logits.reshape(-1, logits.shape[-1]), xs[:, 1:].reshape(-1), reduction="sum").item()
            cnt += xs[:, 1:].numel()
    return tot / cnt


def cmd_train(a):
    import torch
    import torch.nn.functional as F
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    vocab, data = load_data(a)
    cfg = default_cfg(a, len(vocab["tokens"]))
    model = build_model(cfg)
    n_params = sum(p.numel() for p in model.parameters())
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    nodecay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": nodecay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95))
    ck = os.path.join(a.work, "ckpt.pt")
    step, elapsed, hist = 0, 0.0, []
    if os.path.exists(ck) and not a.fresh:
        s = torch.load(ck)
        model.load_state_dict(s["model"]); opt.load_state_dict(s["opt"])
        step, elapsed, hist, cfg = s["step"], s["elapsed"], s["hist"], s["cfg"]
        log(f"resumed at step {step}, {elapsed:.0f} s")
    log(f"model: {n_params/1e6:.2f} M params; cfg {cfg}")
    train = data["train"]
    g = torch.Generator().manual_seed(a.seed + step)
    t_last_ck = time.time()
    ema = None
    while elapsed < a.budget and (a.max_steps <= 0 or step < a.max_steps):
        t0 = time.time()
        frac = elapsed / a.budget
        lr = a.lr * min(1.0, (step + 1) / a.warmup) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, frac))))
        for gr in opt.param_groups:
            gr["lr"] = lr
        starts = torch.randint(0, len(train) - a.ctx - 1, (a.batch,), generator=g)
        xs = torch.stack([train[s: s + a.ctx + 1].long() for s in starts.tolist()])
        logits, aux, loads = model(xs[:, :-1])
        ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), xs[:, 1:].reshape(-1))
        loss = ce + a.aux * aux
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        dt = time.time() - t0
        elapsed += dt
        ema = ce.item() if ema is None else 0.95 * ema + 0.05 * ce.item()
        hist.append((step, round(elapsed, 1), round(ce.item(), 4), round(aux.item(), 4)))
        if step % a.log_every == 0 or step == 1:
            mx = max(max(c) for c in loads) / (a.batch * a.ctx * cfg["n_expert_used"] / max(1, cfg["n_expert"]))
            log(f"step {step} ce {ce.item():.3f} (ema {ema:.3f}) aux {aux.item():.3f} max-load/mean {mx:.2f} lr {lr:.2e} "
                f"{a.batch*a.ctx/dt:.0f} tok/s elapsed {elapsed:.0f}/{a.budget} s")
        if time.time() - t_last_ck > a.ckpt_every:
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step, "elapsed": elapsed, "hist": hist, "cfg": cfg}, ck + ".tmp")
            os.replace(ck + ".tmp", ck)
            t_last_ck = time.time()
    torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step, "elapsed": elapsed, "hist": hist, "cfg": cfg}, ck + ".tmp")
    os.replace(ck + ".tmp", ck)
    last = hist[-50:]
    log(f"done: {step} steps, {elapsed:.0f} s, {step*a.batch*a.ctx} tokens; mean train ce of the last {len(last)} steps "
        f"{sum(h[2] for h in last)/len(last):.3f}")


def cmd_eval(a):
    import torch
    torch.set_num_threads(a.threads)
    vocab, data = load_data(a)
    s = torch.load(os.path.join(a.work, "ckpt.pt"))
    cfg = s["cfg"]
    model = build_model(cfg)
    model.load_state_dict(s["model"])
    model.eval()
    ce = evaluate(model, data["test"], cfg["ctx"])
    # unigram baseline: token frequencies of the training tokens (add-one), on the same held-out targets
    n = (len(data["test"]) - 1) // cfg["ctx"] * cfg["ctx"]
    cnt = torch.bincount(data["train"].long(), minlength=cfg["vocab"]).double() + 1
    lp = (cnt / cnt.sum()).log()
    tgt = data["test"][1: n + 1].long()
    uni = -lp[tgt].mean().item()
    last = s["hist"][-50:]
    res = {"steps": s["step"], "train_seconds": round(s["elapsed"]), "tokens_seen": s["step"] * a.batch * a.ctx,
           "final_train_ce": round(sum(h[2] for h in last) / len(last), 4),
           "heldout_tokens": n, "heldout_ce": round(ce, 4), "heldout_ppl": round(math.exp(ce), 2),
           "unigram_ce": round(uni, 4), "unigram_ppl": round(math.exp(uni), 2)}
    json.dump(res, open(os.path.join(a.work, "eval.json"), "w"), indent=1)
    log(json.dumps(res))
    enc = Encoder(vocab)
    for p in ["And God said", "The quick brown fox", "A computer"]:
        ids = enc.encode(p)
        with torch.no_grad():
            for _ in range(40):
                logits, _, _ = model(torch.tensor([ids[-cfg["ctx"]:]]))
                ids.append(int(logits[0, -1].argmax()))
        log(repr(enc.decode(ids)))


def cmd_export(a):
    import torch
    vocab = json.load(open(os.path.join(a.work, "vocab.json")))
    s = torch.load(os.path.join(a.work, "ckpt.pt"))
    cfg, sd = s["cfg"], s["model"]
    out = a.out or os.path.join(a.work, "export")
    os.makedirs(out, exist_ok=True)
    tensors, off = [], 0
    with open(os.path.join(out, "tensors.f32"), "wb") as fh:
        def put(name, t):
            nonlocal off
            t = t.detach().float().contiguous()
            ne = list(reversed(t.shape))  # ggml order: innermost first
            b = t.numpy().tobytes()
            fh.write(b)
            tensors.append({"name": name, "ne": ne, "offset": off})
            off += len(b)
        put("token_embd.weight", sd["embd"])
        put("output_norm.weight", sd["out_norm"])
        put("output.weight", sd["out"])
        dense = cfg["n_expert"] == 0
        ffn = ([("ffn_gate", "gate"), ("ffn_up", "up"), ("ffn_down", "down")] if dense else
               [("ffn_gate_inp", "router"), ("ffn_gate_exps", "gate"), ("ffn_up_exps", "up"), ("ffn_down_exps", "down")])
        for l in range(cfg["n_layer"]):
            p = f"layers.{l}."
            for gg, tt in [("attn_norm", "attn_norm"), ("attn_q", "wq"), ("attn_k", "wk"), ("attn_v", "wv"), ("attn_output", "wo"),
                           ("attn_q_norm", "q_norm"), ("attn_k_norm", "k_norm"), ("ffn_norm", "ffn_norm")] + ffn:
                put(f"blk.{l}.{gg}.weight", sd[p + tt])
    eot = vocab["tokens"].index("<|endoftext|>")
    manifest = {"arch": "qwen3" if cfg["n_expert"] == 0 else "qwen3moe", "name": a.name, "config": cfg, "tensors": tensors,
                "tokenizer": {"model": "gpt2", "pre": "qwen2", "tokens": vocab["tokens"], "types": vocab["types"], "merges": vocab["merges"],
                              "bos": eot, "eos": eot, "pad": eot, "eot": eot, "add_bos": False}}
    json.dump(manifest, open(os.path.join(out, "manifest.json"), "w"), ensure_ascii=False)
    log(f"export: {len(tensors)} tensors, {off/1e6:.1f} MB f32 -> {out}")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("step", choices=["corpus", "bpe", "vocab", "train", "eval", "export", "all"])
    p.add_argument("--vocab-from", default=None, help="GGUF whose tokenizer the `vocab` step copies (instead of `bpe`)")
    p.add_argument("--work", default="train-work")
    p.add_argument("--vocab", type=int, default=4096)
    p.add_argument("--d", type=int, default=256)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--heads-kv", type=int, default=2)
    p.add_argument("--experts", type=int, default=64, help="0: a dense qwen3 (the draft model) with an FFN of width --ff")
    p.add_argument("--top-k", type=int, default=4)
    p.add_argument("--ff", type=int, default=256)
    p.add_argument("--ctx", type=int, default=256)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--warmup", type=int, default=50)
    p.add_argument("--aux", type=float, default=0.01)
    p.add_argument("--budget", type=float, default=2400, help="training seconds (the cosine schedule follows elapsed time)")
    p.add_argument("--max-steps", type=int, default=0)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--ckpt-every", type=float, default=240)
    p.add_argument("--fresh", action="store_true")
    p.add_argument("--name", default="strata-moe-tiny")
    p.add_argument("--out", default=None)
    a = p.parse_args()
    os.makedirs(a.work, exist_ok=True)
    tok = "vocab" if a.vocab_from else "bpe"
    steps = ["corpus", tok, "train", "eval", "export"] if a.step == "all" else [a.step]
    for s in steps:
        globals()["cmd_" + s](a)


if __name__ == "__main__":
    main()
