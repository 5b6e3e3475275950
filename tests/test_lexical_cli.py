"""Nguyen ch. 5, the command lines: fairseq-train / fairseq-generate of ``transformer_lex`` and
``lstm_luong_fixnorm_lex`` with the masked criterion, and the lexicon tool on the trained checkpoints."""
import math
import re
import sys

import torch
import torch.nn.functional as F

import fairseq_ext  # noqa: F401  (registers models and criterions)
from fairseq.data import Dictionary
from fairseq_ext.modules.vocab_mask import allowed_target_vocab
from fairseq_ext.tools.analysis.lexicon import extract_lexicon, format_lexicon
from harness import TINY_SHAPE_FLAGS, fairseq, generate, hypotheses, n_lines, run, train


# --------------------------------------------------------------------------------------- CLI
TINY_CLI = TINY_SHAPE_FLAGS
MASKED = ["--criterion", "masked_label_smoothed_cross_entropy", "--label-smoothing", "0.1"]


def _allowed_ids(tiny_bin):
    d = Dictionary.load(str(tiny_bin / "dict.en.txt"))
    return d, allowed_target_vocab(d, "train", str(tiny_bin), "es", "en")


def test_cli_transformer_lex_masked_criterion_generate_and_lexicon(tiny_bin, tmp_path):
    log = tmp_path / "train.log"
    ckpt = train(tiny_bin, tmp_path, ["--arch", "transformer_lex_bench", *TINY_CLI, "--norm-type",
                                      "scalenorm", "--fixnorm", "--target-vocab-mask", "train",
                                      "--word-dropout", "0.1"],
                 criterion="masked_label_smoothed_cross_entropy",
                 extra=["--label-smoothing", "0.1", "--log-file", log], max_update=8)
    valid = [float(x) for x in re.findall(r"valid on 'valid' subset \| loss ([0-9.e+]+)", log.read_text())]
    assert valid and all(v < 20 for v in valid)  # dev tokens outside the train vocabulary count as <unk>
    state = torch.load(ckpt, weights_only=True)
    assert "decoder.target_vocab_mask" in state["model"] and "decoder.lexical.weight" in state["model"]
    out = generate(tiny_bin, ckpt, "--batch-size", "16")
    hyps = hypotheses(out)
    assert sorted(hyps) == list(range(n_lines(tiny_bin / "test.ids")))
    d, allowed = _allowed_ids(tiny_bin)
    for h in hyps.values():  # decoding never emits a masked type
        assert all(allowed[d.index(tok)] for tok in h.split())
    p = run([sys.executable, "-m", "fairseq_ext.tools.analysis.lexicon", "--path", ckpt, "--data", tiny_bin,
             "--limit", "5", "--topk", "3"])
    rows = [line.split("\t") for line in p.stdout.strip().splitlines()]
    assert len(rows) == 5 and all(len(r[1].split(", ")) == 3 for r in rows)
    p = run([sys.executable, "-m", "fairseq_ext.tools.analysis.lexicon", "--path", ckpt, "--data", tiny_bin,
             "--words", rows[0][0], "--format", "tsv", "--topk", "4"])
    tsv = [line.split("\t") for line in p.stdout.strip().splitlines()]
    assert [r[0] for r in tsv] == [rows[0][0]] * 4 and [r[3] for r in tsv] == ["1", "2", "3", "4"]
    assert all(allowed[d.index(r[1])] for r in tsv)
    probs = [float(r[2]) for r in tsv]
    assert probs == sorted(probs, reverse=True) and 0 < sum(probs) <= 1


def test_cli_lstm_luong_fixnorm_lex(tiny_bin, tmp_path):
    ckpt = train(tiny_bin, tmp_path, ["--arch", "lstm_luong_fixnorm_lex", "--encoder-embed-dim", "32",
                                      "--encoder-layers", "1", "--decoder-layers", "1",
                                      "--word-dropout", "0.1"],
                 criterion="cross_entropy", max_update=6,
                 extra=["--batch-size", "16", "--clip-norm", "5"])
    out = generate(tiny_bin, ckpt, "--batch-size", "16")
    assert sorted(hypotheses(out)) == list(range(n_lines(tiny_bin / "test.ids")))
    from fairseq_ext.tools.analysis.lexicon import load_model
    model, task = load_model(str(ckpt), str(tiny_bin))
    entries = extract_lexicon(model, task.source_dictionary, task.target_dictionary, [10, 11], topk=2)
    assert [e[0] for e in entries] == [task.source_dictionary[10], task.source_dictionary[11]]
    assert format_lexicon(entries, "json").count("\n") == 2


def test_cli_masked_criterion_with_plain_twt_model(tiny_bin, tmp_path):
    """The criterion alone (model unmasked): smoothing over the train target vocabulary A. The log
    names A's size, and the logged valid loss / nll of the saved model are recomputed here by hand:
    softmax over A only, dev targets outside A scored as <unk>, padding ignored."""
    p = fairseq("train", tiny_bin, "--task", "translation_ext", "--arch", "transformer_twt", *TINY_CLI,
                "--share-all-embeddings", *MASKED, "--report-accuracy", "--optimizer", "adam", "--lr", "1e-3",
                "--lr-scheduler", "inverse_sqrt", "--warmup-updates", "10", "--max-tokens", "1000",
                "--max-update", "4", "--save-dir", tmp_path, "--cpu", "--seed", "1", "--no-progress-bar",
                "--log-format", "simple", "--log-interval", "1", "--no-epoch-checkpoints")
    log = p.stdout + p.stderr
    d, allowed = _allowed_ids(tiny_bin)
    assert 0 < allowed.sum() < len(d)
    assert f"masked label smoothing over {int(allowed.sum())} of {len(d)} target types" in log
    valid = re.findall(r"valid on 'valid' subset \| loss ([0-9.]+) \| nll_loss ([0-9.]+)", log)
    assert valid, log[-2000:]
    loss_bits, nll_bits = map(float, valid[-1])  # the last validation is that of checkpoint_last.pt
    from fairseq_ext.tools.analysis.lexicon import load_model
    model, task = load_model(str(tmp_path / "checkpoint_last.pt"), str(tiny_bin))
    assert getattr(model.decoder, "target_vocab_mask", None) is None  # the mask is the criterion's alone
    task.load_dataset("valid")
    ds = task.dataset("valid")
    batch = ds.collater([ds[i] for i in range(len(ds))])
    with torch.no_grad():
        logits = model(**batch["net_input"])[0].float()
    lprobs = F.log_softmax(logits.masked_fill(~allowed, -1e9), -1)
    target = batch["target"]
    real = target.ne(d.pad())
    outside = real & ~allowed[target]
    assert outside.any()  # the dev set has reference tokens the training targets never had
    y = target.masked_fill(outside, d.unk())
    eps, eps_a = 0.1, 0.1 / (int(allowed.sum()) - 1)
    nll = -lprobs.gather(-1, y.unsqueeze(-1)).squeeze(-1)
    smooth = -lprobs.masked_fill(~allowed, 0.0).sum(-1)
    n, ln2 = real.sum(), math.log(2)
    want_loss = (((1 - eps - eps_a) * nll + eps_a * smooth)[real].sum() / n / ln2).item()
    want_nll = (nll[real].sum() / n / ln2).item()
    assert abs(loss_bits - want_loss) < 2e-3 and abs(nll_bits - want_nll) < 2e-3, \
        (loss_bits, want_loss, nll_bits, want_nll)
    # the same model under fairseq's unmasked label smoothing scores differently
    plain = F.log_softmax(logits, -1)
    plain_nll = -plain.gather(-1, target.unsqueeze(-1)).squeeze(-1)[real].sum() / n / ln2
    assert abs(plain_nll.item() - nll_bits) > 0.05
