"""CUDA check of every registered architecture that runs on a toy batch (a GPU machine only; CI has none).

    python tests/cuda_smoke.py [--device cuda] [--out report.tsv]

For each preset of ``tests/test_registry.py`` that builds and runs there on the CPU: the same model (same seed) on
the CPU and on ``--device``, float32 without TF32; the teacher-forced logits must agree (a tensor created on the
wrong device inside a forward fails here, or a device-dependent branch differs); one backward pass in train mode
must give finite gradients on ``--device``; and where the decoder has an incremental path, step-by-step decoding on
``--device`` must equal the full pass, as it does on the CPU.  One row per architecture; exit status 1 when any row
fails.  ``--device cpu`` runs the same checks CPU-against-CPU (the script's own test).
"""
import argparse
import sys
import traceback
from pathlib import Path

import torch

# run as a script, its folder (tests/) is on sys.path
import test_registry as reg  # the registered-architecture lists and their toy inputs
from harness import build_model, incremental_logits, toy_batch

RNN_DIMS = dict(encoder_embed_dim=16, decoder_embed_dim=16, encoder_hidden_size=16, decoder_hidden_size=16,
                decoder_out_embed_dim=16, attention_dim=16)
LSTM_DIMS = dict(encoder_embed_dim=32, decoder_embed_dim=32, encoder_hidden_size=32, decoder_hidden_size=32,
                 decoder_out_embed_dim=32)


def cases(tmp: Path):
    """(arch, build kwargs, extra-input function of (src, prev), has an incremental decoder)"""
    for a in reg.TRANSFORMER_FAMILY:
        yield a, dict(**reg.NARROW, **reg._lexicon(a, tmp)), None, True
    for a in reg.LSTM_FAMILY:
        yield a, dict(**LSTM_DIMS, **reg._lexicon(a, tmp)), None, True
    for a in reg.RNN_FAMILY + reg.COPYNET_FAMILY:
        yield a, dict(RNN_DIMS), None, True
    for a in reg.DOCMEM_FAMILY:
        yield a, dict(RNN_DIMS), reg.toy_document_input, False
    for a in reg.MARUF_SENTENCE + reg.SELATTN_FAMILY:
        yield a, dict(**reg.NARROW, encoder_layers=2, decoder_layers=2), "doc-if-used", False
    for a in reg.SEG_FAMILY:
        yield a, dict(RNN_DIMS, gate_hidden_dim=16), lambda src, prev: reg.toy_memory_input(), False


def to(x, device):
    if torch.is_tensor(x):
        return x.to(device)
    if isinstance(x, dict):
        return {k: to(v, device) for k, v in x.items()}
    return x


def first(out):
    return out[0] if isinstance(out, (tuple, list)) else out


def check(arch, kw, extra, incremental, device):
    model = build_model(arch, vocab=60, **kw)
    src, lengths, prev = toy_batch()
    if extra == "doc-if-used":
        extra = reg.toy_document_input if getattr(model, "uses_document_context", False) else None
    inputs = extra(src, prev) if extra else {}
    with torch.no_grad():
        ref = first(model(src, lengths, prev, **inputs)).float()
    dev_model = build_model(arch, vocab=60, **kw).to(device)
    d_src, d_len, d_prev, d_inputs = to(src, device), to(lengths, device), to(prev, device), to(inputs, device)
    with torch.no_grad():
        got = first(dev_model(d_src, d_len, d_prev, **d_inputs)).float()
    diff = (got.cpu() - ref).abs().max().item()
    notes = [f"full {diff:.2e}"]
    ok = got.device.type == torch.device(device).type and diff < 1e-4
    if incremental:
        with torch.no_grad():
            inc = first(incremental_logits(dev_model, d_src, d_len, d_prev)).float()
        inc_diff = (inc - got).abs().max().item()
        notes.append(f"incremental {inc_diff:.2e}")
        ok = ok and inc_diff < 1e-4
    dev_model.train()
    loss = first(dev_model(d_src, d_len, d_prev, **d_inputs)).float().logsumexp(-1).mean()
    loss.backward()
    grads = [p.grad for p in dev_model.parameters() if p.requires_grad and p.grad is not None]
    finite = bool(grads) and all(torch.isfinite(g).all().item() for g in grads)
    notes.append(f"grads {len(grads)} finite" if finite else f"grads {len(grads)} NOT finite")
    return ok and finite, "; ".join(notes)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--out", type=Path, default=None, help="write the rows as TSV here too")
    ap.add_argument("--only", default="", help="comma-separated architectures (default: all)")
    args = ap.parse_args(argv)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    tmp = Path("/tmp/cuda_smoke")
    tmp.mkdir(exist_ok=True)
    only = {a for a in args.only.split(",") if a}
    rows, failed = [], 0
    for arch, kw, extra, inc in cases(tmp):
        if only and arch not in only:
            continue
        try:
            ok, note = check(arch, kw, extra, inc, args.device)
        except Exception as e:  # one row per architecture, whatever breaks
            ok, note = False, f"{type(e).__name__}: {e}".splitlines()[0][:300]
            traceback.print_exc(limit=-3)
        failed += not ok
        rows.append(f"{arch}\t{'ok' if ok else 'FAIL'}\t{note}")
        print(rows[-1], flush=True)
    print(f"{len(rows) - failed}/{len(rows)} architectures pass on {args.device}")
    if args.out:
        args.out.write_text("arch\tresult\tnotes\n" + "\n".join(rows) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
