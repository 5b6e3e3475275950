r"""Check that CTranslate2 models exported by ``fairseq-ext-export`` decode as fairseq on a data set.

For every sentence of a binarized subset, fairseq's own greedy output (``SequenceGenerator``, beam 1, float32,
as ``fairseq-generate --beam 1 --max-len-a 0 --max-len-b 50``) against CTranslate2's greedy output of each
model folder, token for token; and the natural-log probability of every reference token and EOS under
teacher forcing (fairseq's ``SequenceScorer``, as ``--score-reference``) against CTranslate2's
``Translator.score_batch``. For Nguyen's ch. 6 Transformers without Tears this checks the fold of ScaleNorm
(Eq. 6.5) into RMSNorm with γ = g/√d and of FixNorm (§6.2.3, Eq. 6.6) into the exported weights
(:mod:`fairseq_ext.tools.export.export_twt`)::

    python -m fairseq_ext.tools.export.greedy_check CHECKPOINT DATA_BIN --ct2 ct2_fp32 ct2_int8 \
        [--subset test] [--limit N] [--max-len-b 50] [--batch-size 64] [--threads 1] [--out greedy.json]

The JSON (``--out``, and stdout) gives ``sentences`` and, per model folder, ``greedy_identical`` (sentences
whose greedy outputs are the same token sequence), ``max_abs_logprob_diff`` (largest difference of one token's
log-probability) and the quantization its export recorded. Progress goes to stderr.
"""
from __future__ import annotations

import json
import os
import sys
import time
from typing import Optional, Sequence

from fairseq_ext.tools.common import ArgumentParser, Timer, ToolError, log, positive_int, read_json, run_cli, write_json
from fairseq_ext.tools.export.export import RECORD

PROGRESS_SECONDS = 10.0


def check_export_folder(model_dir: str, target_size: Optional[int] = None) -> dict:
    """The provenance record of a folder written by ``fairseq-ext-export``; a missing folder or model, or a
    target vocabulary of another size than the data's target dictionary (``target_size``), is a ToolError."""
    if not os.path.isdir(model_dir):
        raise ToolError(f"missing CTranslate2 model folder: {model_dir}")
    for name in (RECORD, "model.bin"):
        if not os.path.isfile(os.path.join(model_dir, name)):
            raise ToolError(f"not a folder written by fairseq-ext-export (no {name})", model_dir)
    record = read_json(os.path.join(model_dir, RECORD))
    if target_size is not None:
        vocab = next((os.path.join(model_dir, f) for f in ("target_vocabulary.json", "shared_vocabulary.json")
                      if os.path.isfile(os.path.join(model_dir, f))), None)
        if vocab is not None and len(read_json(vocab)) != target_size:
            raise ToolError(f"target vocabulary of {len(read_json(vocab))} tokens, but the data's target "
                            f"dictionary has {target_size}: exported from another model or data", vocab)
    return record


def fairseq_greedy_and_scores(checkpoint: str, data: str, subset: str = "test", limit: Optional[int] = None,
                              max_len_b: int = 50, batch_size: int = 64, flags: Sequence[str] = ()) -> dict:
    """fairseq's decoding of ``subset`` (its first ``limit`` sentences), float32 on the CPU: ``{"src", "tgt",
    "hyp", "scores"}``, each ``{sentence id: list}`` -- source and reference pieces (without EOS), the greedy
    hypothesis (beam 1, at most ``max_len_b`` tokens, as ``fairseq-generate --beam 1 --max-len-a 0``) and the
    log-probability of every reference token and EOS (``SequenceScorer``, as ``--score-reference``)."""
    import torch

    import fairseq_ext
    fairseq_ext.register()
    from fairseq import options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq.sequence_scorer import SequenceScorer

    from fairseq_ext.modules.checkpoint import load_ensemble, require_checkpoint

    require_checkpoint(checkpoint)
    if not os.path.isdir(data):
        raise ToolError(f"missing data folder: {data}")
    args = options.parse_args_and_arch(options.get_generation_parser(), [
        data, "--task", "translation_ext", "--path", checkpoint, "--cpu", "--beam", "1", "--max-len-a", "0",
        "--max-len-b", str(max_len_b), *flags])
    cfg = convert_namespace_to_omegaconf(args)
    models, _, task = load_ensemble([checkpoint], arg_overrides={"data": data, "cpu_bf16": False}, frozen=True,
                                    generation=cfg)
    try:
        task.load_dataset(subset)
    except FileNotFoundError as e:
        raise ToolError(f"no subset '{subset}' in the data folder ({e})", data) from None
    ds, sd, td = task.dataset(subset), task.source_dictionary, task.target_dictionary
    n = len(ds) if limit is None else min(limit, len(ds))
    order = [int(i) for i in ds.ordered_indices() if i < n]  # by length: batches of similar lengths
    generator, scorer = task.build_generator(models, cfg.generation), SequenceScorer(td)
    out: dict = {"src": {}, "tgt": {}, "hyp": {}, "scores": {}, "target_size": len(td)}
    last = time.time()
    for b in range(0, len(order), batch_size):
        sample = ds.collater([ds[i] for i in order[b:b + batch_size]])
        greedy = task.inference_step(generator, models, sample)
        with torch.no_grad():
            scored = scorer.generate(models, sample)
        for k, i in enumerate(sample["id"].tolist()):
            out["src"][i] = [sd[t] for t in ds.src[i].tolist()[:-1]]
            out["tgt"][i] = [td[t] for t in ds.tgt[i].tolist()[:-1]]
            out["hyp"][i] = [td[t] for t in greedy[k][0]["tokens"].tolist()[:-1]]
            out["scores"][i] = scored[k][0]["positional_scores"].tolist()
        if time.time() - last >= PROGRESS_SECONDS:
            last = time.time()
            log(f"[greedy_check] fairseq: {len(out['src'])}/{n} sentences")
    return out


def compare_ct2(model_dir: str, ref: dict, max_len_b: int = 50, batch_size: int = 64, threads: int = 1) -> dict:
    """CTranslate2's greedy outputs and reference scores of ``model_dir`` against fairseq's (``ref``, as
    :func:`fairseq_greedy_and_scores` returns): identical greedy outputs and the largest log-prob difference."""
    import ctranslate2

    record = check_export_folder(model_dir, ref.get("target_size"))
    tr = ctranslate2.Translator(model_dir, device="cpu", intra_threads=threads, inter_threads=1)
    ids = sorted(ref["src"])
    same, worst, differ, last = 0, 0.0, [], time.time()
    for b in range(0, len(ids), batch_size):
        chunk = ids[b:b + batch_size]
        src = [ref["src"][i] for i in chunk]
        res = tr.translate_batch(src, beam_size=1, max_decoding_length=max_len_b, min_decoding_length=1,
                                 max_batch_size=batch_size)
        scored = tr.score_batch(src, [ref["tgt"][i] for i in chunk], max_batch_size=batch_size)
        for i, r, s in zip(chunk, res, scored):
            if r.hypotheses[0] == ref["hyp"][i]:
                same += 1
            else:
                differ.append(i)
            if len(s.log_probs) != len(ref["scores"][i]):
                raise ToolError(f"sentence {i}: CTranslate2 scored {len(s.log_probs)} target tokens, fairseq "
                                f"{len(ref['scores'][i])}: exported with another dictionary", model_dir)
            worst = max([worst, *(abs(a - c) for a, c in zip(s.log_probs, ref["scores"][i]))])
        if time.time() - last >= PROGRESS_SECONDS:
            last = time.time()
            log(f"[greedy_check] {model_dir}: {b + len(chunk)}/{len(ids)} sentences")
    return {"quantization": record.get("quantization"), "greedy_identical": same,
            "max_abs_logprob_diff": worst, "first_differing_ids": differ[:10]}


def build_parser() -> ArgumentParser:
    p = ArgumentParser(prog="python -m fairseq_ext.tools.export.greedy_check", description=__doc__.split("\n\n")[0])
    p.add_argument("checkpoint", help="fairseq checkpoint (.pt) the models were exported from")
    p.add_argument("data", help="binarized data folder (fairseq-preprocess)")
    p.add_argument("--ct2", nargs="+", required=True, metavar="DIR", help="CTranslate2 model folder(s) written "
                                                                         "by fairseq-ext-export")
    p.add_argument("--subset", default="test", help="subset of DATA (default test)")
    p.add_argument("--limit", type=positive_int, help="only the first N sentences of the subset")
    p.add_argument("--max-len-b", type=positive_int, default=50,
                   help="at most this many output tokens, both decoders (default 50)")
    p.add_argument("--batch-size", type=positive_int, default=64, help="sentences per batch (default 64)")
    p.add_argument("--threads", type=positive_int, default=1, help="CPU threads of torch and CTranslate2 (default 1)")
    p.add_argument("--out", metavar="JSON", help="also write the result there")
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    a = build_parser().parse_args(argv)
    if not os.path.isfile(a.checkpoint):  # fail before the (long) fairseq pass
        raise ToolError(f"checkpoint not found: {a.checkpoint}")
    if not os.path.isdir(a.data):
        raise ToolError(f"missing data folder: {a.data}")
    for d in a.ct2:
        check_export_folder(d)
    try:
        import ctranslate2  # noqa: F401
    except ImportError:
        raise ToolError("ctranslate2 is not installed: pip install 'fairseq_ext[ctranslate2]'") from None
    import torch

    torch.set_num_threads(a.threads)
    timer = Timer()
    ref = fairseq_greedy_and_scores(a.checkpoint, a.data, a.subset, a.limit, a.max_len_b, a.batch_size)
    for d in a.ct2:
        check_export_folder(d, ref["target_size"])
    log(f"[greedy_check] fairseq: {len(ref['src'])} sentences of {a.subset} in {timer}")
    result = {"checkpoint": os.path.abspath(a.checkpoint), "data": os.path.abspath(a.data), "subset": a.subset,
              "sentences": len(ref["src"]), "max_len_b": a.max_len_b, "models": {}}
    for d in a.ct2:
        result["models"][d] = r = compare_ct2(d, ref, a.max_len_b, a.batch_size, a.threads)
        log(f"[greedy_check] {d} ({r['quantization']}): greedy identical {r['greedy_identical']}/"
            f"{result['sentences']}, max |Δ log p| {r['max_abs_logprob_diff']:.3g}")
    if a.out:
        write_json(a.out, result)
    print(json.dumps(result, ensure_ascii=False))
    return 0


def cli_main(argv: Optional[Sequence[str]] = None) -> None:
    run_cli(main, argv)


if __name__ == "__main__":
    cli_main(sys.argv[1:])
