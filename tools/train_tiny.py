"""Train the embedded tiny Inkling on the synthetic retrieval task (one GPU command, <= 10 minutes).

    PYTHONPATH=$PWD python tools/train_tiny.py --out $OUT/tiny --minutes 8

Trains through `model.dense_logits` (the served math in differentiable torch; bf16 autocast, fp32 master weights),
evaluates retrieval by depth on held-out prompts during training, then serves the final bf16 checkpoint through the
package's kernels (`model.Engine`) on fresh held-out seeds. Writes the checkpoint (`save_pretrained`) and `train_log.json`.
"""
import argparse, json, math, platform, queue, sys, threading, time
from pathlib import Path
import numpy as np
import torch
import torch.nn.functional as F
from inkling_fp8kv.model import (InklingLM, Engine, dense_logits, retrieval_prompts, sample_sequence, tiny_lm_config, PAD)

EVAL_DEPTHS = (256, 512, 1024, 2048, 3072)
MONITOR_SEED, FINAL_SEED = 1000, 2000          # prompt seeds never used in training (training draws sample_sequence streams)

def batches(seed, stages, q):
    "Producer thread: training batches per curriculum stage."
    step = 0
    while True:
        L, B, n_pairs, n_queries = stages(step)
        rng = np.random.default_rng([seed, step])
        seqs = [sample_sequence(rng, L, n_pairs=n_pairs, n_queries=n_queries) for _ in range(B)]
        toks = torch.from_numpy(np.stack([s.tokens for s in seqs]))
        mask = torch.zeros(B, L, dtype=torch.bool)
        for b, s in enumerate(seqs): mask[b, s.answer_pos] = True
        q.put((step, L, toks.pin_memory() if torch.cuda.is_available() else toks, mask))
        step += 1

@torch.no_grad()
def dense_accuracy(model, prompts, dev, bs=32):
    "Greedy next-token accuracy at the prompts' last position through the dense path (right-padded, causal)."
    ok = 0
    for i in range(0, len(prompts["prompts"]), bs):
        ps = prompts["prompts"][i:i + bs]
        L = max(len(p) for p in ps)
        t = torch.full((len(ps), L), PAD, dtype=torch.int64)
        for b, p in enumerate(ps): t[b, :len(p)] = torch.from_numpy(p)
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=dev.type == "cuda"):
            lg = dense_logits(model, t.to(dev))
        last = torch.tensor([len(p) - 1 for p in ps], device=dev)
        pred = lg[torch.arange(len(ps), device=dev), last].argmax(-1).cpu()
        ok += int((pred == torch.tensor(prompts["answers"][i:i + bs])).sum())
    return ok / len(prompts["prompts"])

def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--minutes", type=float, default=9.3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--short-frac", type=float, default=0.45, help="fraction of the time budget on 1024-token sequences")
    ap.add_argument("--max-len", type=int, default=4096)
    ap.add_argument("--n-eval", type=int, default=64, help="monitor prompts per depth")
    ap.add_argument("--n-final", type=int, default=100, help="final served-eval prompts per depth")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    a = ap.parse_args()
    dev = torch.device(a.device)
    t_start = time.time(); budget = a.minutes * 60
    torch.manual_seed(a.seed)
    cfg = tiny_lm_config()
    model = InklingLM(cfg, kernels="reference" if dev.type == "cpu" else "triton", device=dev).float()
    model.init_weights(seed=a.seed)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2 and "sconv" not in n]
    other = [p for n, p in model.named_parameters() if not (p.dim() >= 2 and "sconv" not in n)]
    opt = torch.optim.AdamW([dict(params=decay, weight_decay=0.05), dict(params=other, weight_decay=0.0)], lr=a.lr, betas=(0.9, 0.95))
    long_L = a.max_len
    def stages(step):
        return (1024, 64, 24, 32) if time.time() - t_start < a.short_frac * budget else (long_L, 16 * 4096 // long_L, 64, 96)
    q = queue.Queue(maxsize=4)
    threading.Thread(target=batches, args=(a.seed, stages, q), daemon=True).start()
    depths = [d for d in EVAL_DEPTHS if d < a.max_len - 200]
    monitor = {d: retrieval_prompts(MONITOR_SEED, a.n_eval, d) for d in depths}
    log = dict(loss=[], evals=[], config=tiny_lm_config().__dict__ | {"local_layer_ids": list(cfg.local_layer_ids)})
    warm, step, good, t_eval = 200, 0, 0, time.time()
    train_budget = budget - (90 if dev.type == "cuda" else 5)     # leave time for the served evaluation
    while time.time() - t_start < train_budget:
        frac = (time.time() - t_start) / train_budget
        lr = a.lr * min(1.0, (step + 1) / warm) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(frac, 1.0))))
        for g in opt.param_groups: g["lr"] = lr
        _, L, toks, mask = q.get()
        toks, mask = toks.to(dev, non_blocking=True), mask.to(dev, non_blocking=True)
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=dev.type == "cuda"):
            logits = dense_logits(model, toks)
        tgt = toks[:, 1:][mask[:, :-1]]
        loss = F.cross_entropy(logits[:, :-1][mask[:, :-1]].float(), tgt)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        if step % 20 == 0:
            log["loss"].append(dict(step=step, t=round(time.time() - t_start, 1), L=L, loss=round(loss.item(), 4), lr=lr))
            print(f"step {step} t={time.time() - t_start:.0f}s L={L} loss {loss.item():.4f} lr {lr:.2e}", flush=True)
        if time.time() - t_eval > 30:
            model.eval(); acc = {d: dense_accuracy(model, monitor[d], dev) for d in depths}; model.train()
            log["evals"].append(dict(step=step, t=round(time.time() - t_start, 1), acc=acc))
            print(f"  eval step {step}: " + " ".join(f"{d}:{v:.3f}" for d, v in acc.items()), flush=True)
            t_eval = time.time()
            good = good + 1 if min(acc.values()) >= 0.995 and L == long_L else 0
            if good >= 2: break
    log["train_seconds"], log["steps"] = round(time.time() - t_start, 1), step
    out = Path(a.out)
    model = model.to(torch.bfloat16)
    model.save_pretrained(out)
    (out.parent / "train_log.json").write_text(json.dumps(log, indent=1) + "\n")
    # served evaluation of the saved checkpoint: the package's kernels, paged caches, chunked prefill
    served = InklingLM.from_pretrained(out, kernels="reference" if dev.type == "cpu" else "triton", device=dev, warn=False)
    eng = Engine(served, max_num_seqs=64, max_num_batched_tokens=8192, block_size=16, max_model_len=4096)
    final = {}
    for d in depths:
        if time.time() - t_start > budget - 10: break
        p = retrieval_prompts(FINAL_SEED, a.n_final, d)
        got = eng.generate(p["prompts"], 1)
        final[d] = float(np.mean([g[0] == ans for g, ans in zip(got, p["answers"])]))
        print(f"served bf16 depth {d}: {final[d]:.3f} (n={a.n_final})", flush=True)
    log["served_bf16"] = dict(n=a.n_final, seed=FINAL_SEED, acc=final)
    log["total_seconds"] = round(time.time() - t_start, 1)
    log["env"] = dict(gpu=torch.cuda.get_device_name() if dev.type == "cuda" else platform.processor(), torch=torch.__version__,
                      python=sys.version.split()[0], date=time.strftime("%Y-%m-%d"), command=" ".join(["python"] + sys.argv))
    (out.parent / "train_log.json").write_text(json.dumps(log, indent=1) + "\n")
    print("saved", out, "in", log["total_seconds"], "s")

if __name__ == "__main__":
    main()
