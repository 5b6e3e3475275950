"""Sequence-level knowledge distillation corpus (Gu 2018 §8.4.1; Kim & Rush 2016).

"Train the AR teacher on the corpus, decode the whole training set once with greedy decoding, and train the
student on (original source, teacher output)."  This CLI decodes the chosen splits of a binarized folder
with a frozen autoregressive checkpoint and writes a new binarized folder with the same dictionaries, the
same sources and the teacher's outputs as targets::

    python -m fairseq_ext.tools.corpora.distill --path teacher/checkpoint_best.pt --data data-bin --out data-bin-kd \\
        [--splits train valid] [--beam 1] [--lenpen 1.0] [--max-len-a 1.2 --max-len-b 10] \\
        [--max-tokens 8000 | --batch-size 64] [--chunk-size 5000] [--gpu] [--fertility eflomal]

* **batched**: sentences of a chunk are sorted by length and decoded in batches of ``--max-tokens`` source
  tokens (and at most ``--batch-size`` sentences) with fairseq's beam search (``--beam 1`` = greedy, the
  thesis' default; ``--beam 4`` the ablation);
* **resumable**: every chunk of ``--chunk-size`` consecutive sentence ids is written atomically to
  ``OUT/.distill/{split}/chunk-NNNNNN.tsv`` (``id<TAB>token ids``); a rerun skips finished chunks (the
  parameters are recorded in ``OUT/.distill/params.json``; a rerun with different ones stops unless
  ``--force``, which starts over);
* **progress**: one line per chunk with sentences done, sentences/s and the ETA;
* **binarize**: the outputs are written as ``OUT/{split}.{src}-{tgt}.{tgt}.{bin,idx}`` (token ids straight
  from the teacher, + ⟨eos⟩; no detokenisation round trip), the source ``.bin/.idx``, ``dict.*.txt``,
  ``{split}.ids`` and every split that is not distilled (e.g. ``test``, whose references stay the real
  ones) are copied; ``OUT/{split}.distill.{tgt}`` holds the outputs as subword text for inspection and
  ``OUT/distill.json`` the parameters and counts.  A teacher output that is empty is replaced by the
  original reference (counted as ``empty_replaced``), because the NAT needs T ≥ 1;
* ``--fertility eflomal|diagonal`` then runs :mod:`fairseq_ext.tools.corpora.fertility` on the new folder.
"""
import logging
import os
import shutil
import time
from argparse import Namespace
from typing import Dict, List, Optional

import numpy as np
import torch

from fairseq_ext.data.binarized import load_tokens, pair_splits, split_prefix
from fairseq_ext.modules.checkpoint import load_ensemble, require_checkpoint
from fairseq_ext.tools.common import ArgumentParser, ToolError, json_line, log, read_json, run_cli, write_json
from fairseq_ext.tools.corpora.fertility import compute_fertilities, infer_pair


def eta(seconds: float) -> str:
    seconds = int(max(seconds, 0))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s"


def load_teacher(path: str, data: str, use_cuda: bool = False):
    """(model, task) of an AR checkpoint, frozen (eval mode, no gradients), with the dictionaries of ``data``.
    (Under ``--cpu-bf16`` a frozen teacher once took a slow matmul path, 127 s instead of 4.1 s for a batch:
    :mod:`fairseq_ext.modules.frozen_linear`.)"""
    models, _cfg, task = load_ensemble([path], arg_overrides={"data": data}, frozen=True, use_cuda=use_cuda)
    return models[0], task


def make_batches(sizes: np.ndarray, ids: np.ndarray, max_tokens: Optional[int], batch_size: Optional[int]
                 ) -> List[np.ndarray]:
    """Length-sorted batches of ``ids`` with ≤ max_tokens padded source tokens and ≤ batch_size sentences."""
    order = ids[np.argsort(sizes[ids], kind="stable")]
    batches, cur, longest = [], [], 0
    for i in order.tolist():
        n = int(sizes[i])
        new_longest = max(longest, n)
        too_many = (max_tokens and cur and new_longest * (len(cur) + 1) > max_tokens) or \
                   (batch_size and len(cur) >= batch_size)
        if too_many:
            batches.append(np.asarray(cur))
            cur, new_longest = [], n
        cur.append(i)
        longest = new_longest
    if cur:
        batches.append(np.asarray(cur))
    return batches


def chunk_path(work: str, split: str, k: int) -> str:
    return os.path.join(work, split, f"chunk-{k:06d}.tsv")


def decode_split(model, task, split: str, work: str, beam: int, lenpen: float, max_len_a: float, max_len_b: int,
                 max_tokens: Optional[int], batch_size: Optional[int], chunk_size: int, use_cuda: bool) -> Dict:
    """Decode ``split`` chunk by chunk into ``work/split``; returns counts."""
    from fairseq import utils

    task.load_dataset(split)
    ds = task.dataset(split)
    n = len(ds)
    gen_args = Namespace(beam=beam, lenpen=lenpen, max_len_a=max_len_a, max_len_b=max_len_b, min_len=1,
                         unkpen=0, sampling=False, nbest=1)
    generator = task.build_generator([model], gen_args)
    os.makedirs(os.path.join(work, split), exist_ok=True)
    n_chunks = (n + chunk_size - 1) // chunk_size
    done = sum(min(chunk_size, n - k * chunk_size) for k in range(n_chunks) if os.path.exists(chunk_path(work, split, k)))
    if done:
        log(f"[distill] {split}: resuming, {done}/{n} sentences already decoded")
    t0, decoded = time.time(), 0
    sizes = np.asarray(ds.src_sizes)
    for k in range(n_chunks):
        path = chunk_path(work, split, k)
        if os.path.exists(path):
            continue
        ids = np.arange(k * chunk_size, min(n, (k + 1) * chunk_size))
        out = {}
        for batch in make_batches(sizes, ids, max_tokens, batch_size):
            sample = ds.collater([ds[int(i)] for i in batch])
            if use_cuda:
                sample = utils.move_to_cuda(sample)
            hypos = task.inference_step(generator, [model], sample)
            for sid, h in zip(sample["id"].tolist(), hypos):
                toks = h[0]["tokens"].cpu()
                toks = toks[toks.ne(task.target_dictionary.eos())]
                out[sid] = toks.tolist()
        tmp = f"{path}.tmp-{os.getpid()}"
        with open(tmp, "w", encoding="utf-8") as f:
            for sid in ids.tolist():
                f.write(f"{sid}\t{' '.join(map(str, out[sid]))}\n")
        os.replace(tmp, path)
        decoded += len(ids)
        done += len(ids)
        rate = decoded / max(time.time() - t0, 1e-9)
        log(f"[distill] {split}: {done}/{n} sentences ({100.0 * done / n:.1f}%), {rate:.1f} sent/s, "
             f"ETA {eta((n - done) / max(rate, 1e-9))}")
    return {"sentences": n, "chunks": n_chunks}


def read_chunks(work: str, split: str, n: int, chunk_size: int) -> List[List[int]]:
    outs: List[Optional[List[int]]] = [None] * n
    for k in range((n + chunk_size - 1) // chunk_size):
        with open(chunk_path(work, split, k), encoding="utf-8") as f:
            for line in f:
                sid, _, toks = line.rstrip("\n").partition("\t")
                outs[int(sid)] = [int(t) for t in toks.split()] if toks else []
    missing = [i for i, o in enumerate(outs) if o is None]
    if missing:
        raise ToolError(f"{len(missing)} {split} sentences missing from the chunks (first {missing[:5]}); "
                        "rerun with --force", os.path.join(work, split))
    return outs  # type: ignore[return-value]


def copy_file(src: str, dst: str) -> None:
    if os.path.abspath(src) == os.path.abspath(dst):
        return
    tmp = f"{dst}.tmp-{os.getpid()}"
    shutil.copyfile(src, tmp)
    os.replace(tmp, dst)


def write_split(data: str, out: str, split: str, src: str, tgt: str, outputs: List[List[int]], tgt_dict) -> Dict:
    """Binarize the teacher outputs of ``split`` into ``out`` (+ copy the source side)."""
    from fairseq.data import indexed_dataset

    ref_prefix = split_prefix(data, split, src, tgt, tgt)
    src_prefix = split_prefix(data, split, src, tgt, src)
    if ref_prefix is None or src_prefix is None:
        raise ToolError(f"no binarized {split}.{src}-{tgt} source and target", data)
    ref = load_tokens(ref_prefix)
    eos = tgt_dict.eos()
    prefix = os.path.join(out, os.path.basename(ref_prefix))  # the pair named as in --data
    tmp = f"{prefix}.tmp-{os.getpid()}"
    builder = indexed_dataset.make_builder(indexed_dataset.data_file_path(tmp), impl="mmap", vocab_size=len(tgt_dict))
    replaced, ntok = 0, 0
    with open(os.path.join(out, f"{split}.distill.{tgt}.tmp"), "w", encoding="utf-8") as txt:
        for i, toks in enumerate(outputs):
            if not toks:
                replaced += 1
                toks = [t for t in ref[i].tolist() if t != eos]
            ntok += len(toks)
            builder.add_item(torch.tensor(toks + [eos], dtype=torch.int64))
            txt.write(tgt_dict.string(torch.tensor(toks, dtype=torch.int64)) + "\n")
    builder.finalize(indexed_dataset.index_file_path(tmp))
    os.replace(indexed_dataset.data_file_path(tmp), indexed_dataset.data_file_path(prefix))
    os.replace(indexed_dataset.index_file_path(tmp), indexed_dataset.index_file_path(prefix))
    os.replace(os.path.join(out, f"{split}.distill.{tgt}.tmp"), os.path.join(out, f"{split}.distill.{tgt}"))
    for ext in ("bin", "idx"):
        copy_file(f"{src_prefix}.{ext}", os.path.join(out, f"{os.path.basename(src_prefix)}.{ext}"))
    return {"sentences": len(outputs), "target_tokens": ntok, "empty_replaced": replaced}


def distill(path: str, data: str, out: str, splits=("train",), beam: int = 1, lenpen: float = 1.0,
            max_len_a: float = 1.2, max_len_b: int = 10, max_tokens: Optional[int] = 8000,
            batch_size: Optional[int] = None, chunk_size: int = 5000, use_cuda: bool = False,
            force: bool = False, fertility: Optional[str] = None) -> str:
    """Decode ``splits`` of ``data`` with the teacher ``path`` into a new binarized folder ``out``."""
    if os.path.abspath(out) == os.path.abspath(data):
        raise ToolError("--out must differ from --data")
    require_checkpoint(path)
    if not os.path.isdir(data):
        raise ToolError(f"missing input folder: {data}")
    os.makedirs(out, exist_ok=True)
    work = os.path.join(out, ".distill")
    params = {"version": 1, "teacher": os.path.abspath(path), "data": os.path.abspath(data), "splits": list(splits),
              "beam": beam, "lenpen": lenpen, "max_len_a": max_len_a, "max_len_b": max_len_b,
              "chunk_size": chunk_size}
    ppath = os.path.join(work, "params.json")
    if os.path.exists(ppath):
        old = read_json(ppath)
        if old != params:
            if not force:
                raise ToolError(f"{work} was started with other parameters ({old}); use --force to start over")
            shutil.rmtree(work)
    elif force and os.path.exists(work):
        shutil.rmtree(work)
    os.makedirs(work, exist_ok=True)
    write_json(ppath, params)

    model, task = load_teacher(path, data, use_cuda)
    src, tgt = task.cfg.source_lang, task.cfg.target_lang
    if not src or not tgt:
        src, tgt = infer_pair(data)
    log(f"[distill] teacher {path} ({src}->{tgt}), beam {beam}, splits {', '.join(splits)} -> {out}")
    stats = {"params": params, "splits": {}}
    t0 = time.time()
    with torch.no_grad():
        for split in splits:
            decode_split(model, task, split, work, beam, lenpen, max_len_a, max_len_b, max_tokens, batch_size,
                         chunk_size, use_cuda)
            n = len(task.dataset(split))
            outputs = read_chunks(work, split, n, chunk_size)
            stats["splits"][split] = write_split(data, out, split, src, tgt, outputs, task.target_dictionary)
            log(f"[distill] {split}: {json_line(stats['splits'][split])}")
    # dictionaries, ids, and the splits that are not distilled
    for name in sorted(os.listdir(data)):
        full = os.path.join(data, name)
        if not os.path.isfile(full):
            continue
        split = name.split(".")[0]
        keep_target = split not in splits
        if name.startswith("dict.") or name.endswith(".ids") or name in ("segment.json",) or \
                (keep_target and name.startswith((f"{split}.{src}-{tgt}.", f"{split}.{tgt}-{src}."))
                 and name.endswith((".bin", ".idx"))):
            copy_file(full, os.path.join(out, name))
    stats["seconds"] = round(time.time() - t0, 1)
    write_json(os.path.join(out, "distill.json"), stats)
    if fertility:
        compute_fertilities(out, src, tgt, pair_splits(out, src, tgt), aligner=fertility, log=log)
    log(f"[distill] done in {eta(time.time() - t0)} -> {out}")
    return out


def main(argv=None) -> int:
    ap = ArgumentParser(prog="fairseq-ext-distill", description=__doc__.split("\n\n")[0])
    ap.add_argument("--path", required=True, help="autoregressive teacher checkpoint")
    ap.add_argument("--data", required=True, help="binarized folder the teacher was trained on")
    ap.add_argument("--out", required=True, help="output binarized folder (distilled corpus)")
    ap.add_argument("--splits", nargs="+", default=["train"], help="splits to distill (default: train)")
    ap.add_argument("--beam", type=int, default=1, help="beam size (1 = greedy, the thesis' default)")
    ap.add_argument("--lenpen", type=float, default=1.0)
    ap.add_argument("--max-len-a", type=float, default=1.2)
    ap.add_argument("--max-len-b", type=int, default=10)
    ap.add_argument("--max-tokens", type=int, default=8000, help="padded source tokens per batch")
    ap.add_argument("--batch-size", type=int, default=None, help="sentences per batch (cap)")
    ap.add_argument("--chunk-size", type=int, default=5000, help="sentences per resumable chunk")
    ap.add_argument("--gpu", action="store_true", help="decode on CUDA")
    ap.add_argument("--force", action="store_true", help="discard earlier partial work")
    ap.add_argument("--fertility", choices=("eflomal", "diagonal"), help="then compute fertilities on --out")
    a = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    distill(a.path, a.data, a.out, a.splits, a.beam, a.lenpen, a.max_len_a, a.max_len_b, a.max_tokens,
            a.batch_size, a.chunk_size, a.gpu and torch.cuda.is_available(), a.force, a.fertility)
    return 0


def cli_main(argv=None) -> None:
    """Console script ``fairseq-ext-distill``."""
    run_cli(main, argv)


if __name__ == "__main__":
    cli_main()
