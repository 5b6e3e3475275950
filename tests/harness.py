"""Helpers that run the real fairseq command lines with ``--user-dir fairseq_ext`` on tiny data.

In the spirit of fairseq's ``tests/utils.py``: each later component adds a few lines, e.g.::

    def test_my_arch_cli(tiny_bin, tmp_path):
        ckpt = train(tiny_bin, tmp_path, ["--arch", "my_arch_tiny"], max_update=10)
        out = generate(tiny_bin, ckpt)
        assert count_hypotheses(out) == n_lines(tiny_bin / "test.ids")

Commands run as subprocesses of the current interpreter's environment (``.venv/bin/fairseq-*``),
exactly as a user types them, with ``OMP_NUM_THREADS=1``.
"""
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
USER_DIR = ROOT / "fairseq_ext"
TINY = ROOT / "tests" / "data" / "bible_tiny"
BIN = Path(sys.executable).parent

# The tests' transformer shape: 2+2 layers, d 32, FFN 64, 4 heads (keyword arguments of build_model; a test
# changes a size with ``dict(TINY_SHAPE, encoder_layers=4)``). It trains a step in a few ms on the tiny slice.
TINY_SHAPE = dict(encoder_layers=2, decoder_layers=2, encoder_embed_dim=32, decoder_embed_dim=32,
                  encoder_ffn_embed_dim=64, decoder_ffn_embed_dim=64, encoder_attention_heads=4,
                  decoder_attention_heads=4)


def as_flags(options: dict) -> list:
    """Keyword options as fairseq command-line flags (``encoder_layers=2`` -> ``--encoder-layers 2``; True: the
    flag alone; False or None: left out)."""
    flags = []
    for key, value in options.items():
        flag = "--" + key.replace("_", "-")
        if value is True:
            flags.append(flag)
        elif value is not False and value is not None:
            flags += [flag, str(value)]
    return flags


TINY_SHAPE_FLAGS = as_flags(TINY_SHAPE)
TINY_TRANSFORMER = ["--arch", "transformer", *TINY_SHAPE_FLAGS, "--share-all-embeddings"]


def env(**extra) -> dict:
    e = dict(os.environ)
    e.update({"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"})
    e.update({k: str(v) for k, v in extra.items()})
    return e


def run(cmd, cwd=None, timeout=600, check=True, input_text=None, **env_extra) -> subprocess.CompletedProcess:
    """Run a command; on failure raise with the tail of its output (so pytest shows why)."""
    cmd = [str(c) for c in cmd]
    p = subprocess.run(cmd, cwd=cwd or ROOT, env=env(**env_extra), capture_output=True, text=True,
                       timeout=timeout, input=input_text)
    if check and p.returncode != 0:
        raise AssertionError(f"command failed ({p.returncode}): {' '.join(cmd)}\n"
                             f"--- stdout ---\n{p.stdout[-3000:]}\n--- stderr ---\n{p.stderr[-5000:]}")
    return p


def fairseq(tool: str, *args, user_dir=True, **kw) -> subprocess.CompletedProcess:
    """``fairseq-<tool> [--user-dir fairseq_ext] args`` through the installed console script."""
    cmd = [BIN / f"fairseq-{tool}"]
    if user_dir:
        cmd += ["--user-dir", USER_DIR]
    return run(cmd + list(args), **kw)


def fairseq_in_one_process(commands, **kw) -> subprocess.CompletedProcess:
    """``commands`` = [(tool, argv after the program name)] of ``fairseq-train`` / ``fairseq-generate`` run by the
    console scripts' own ``cli_main``, one after the other in one interpreter (saves the import time)."""
    import json

    script = ("import json, sys\nfrom fairseq_cli import generate, train\n"
              "for tool, argv in json.loads(sys.argv[1]):\n"
              "    sys.argv = ['fairseq-' + tool] + argv\n"
              "    {'train': train, 'generate': generate}[tool].cli_main()\n")
    return run([sys.executable, "-c", script, json.dumps(commands)], **kw)


def data_cli(*args, **kw) -> subprocess.CompletedProcess:
    return run([sys.executable, "-m", "fairseq_ext.tools.corpora.corpora", *args], **kw)


def prepare_tiny(out: Path, vocab_size: int = 300, method: str = "sentencepiece") -> Path:
    """Segment and binarize the committed tiny Bible slice; returns the ``bin`` folder."""
    seg = out / "seg"
    data_cli("bpe", TINY, seg, "--src", "es", "--tgt", "en", "--method", method,
             "--vocab-size", vocab_size)
    data_cli("binarize", seg, "--out", out, "--src", "es", "--tgt", "en")
    return out / "bin"


def train(data_bin, save_dir, model_args=None, *, task="translation_ext",
          criterion="label_smoothed_cross_entropy", max_update=20, extra=(), **kw) -> Path:
    """Train a few updates; returns the path of ``checkpoint_last.pt``."""
    args = [data_bin, "--task", task, *(model_args or TINY_TRANSFORMER),
            "--criterion", criterion, "--optimizer", "adam", "--lr", "1e-3",
            "--lr-scheduler", "inverse_sqrt", "--warmup-updates", "10", "--max-tokens", "1000",
            "--max-update", max_update, "--save-dir", save_dir, "--cpu", "--seed", "1",
            "--no-progress-bar", "--log-format", "simple", "--log-interval", "1",
            "--no-epoch-checkpoints", *extra]
    if criterion == "label_smoothed_cross_entropy" and "--label-smoothing" not in extra:
        args += ["--label-smoothing", "0.1"]
    fairseq("train", *args, **kw)
    ckpt = Path(save_dir) / "checkpoint_last.pt"
    assert ckpt.exists(), f"no checkpoint written in {save_dir}"
    return ckpt


def task_batch(task, n: int = 6, split: str = "test", start: int = 0) -> dict:
    """The task's own batch of the sentences ``start .. start + n - 1`` of ``split`` (loaded here)."""
    task.load_dataset(split)
    ds = task.dataset(split)
    return ds.collater([ds[i] for i in range(start, start + n)])


def nmt_state(model) -> dict:
    """A copy of the frozen NMT's tensors (``encoder.*``, ``decoder.*``) of a head trained on top of one."""
    return {k: v.clone() for k, v in model.state_dict().items() if k.startswith(("encoder.", "decoder."))}


def randomise_parameters(module, seed: int = 0, scale: float = 1.0) -> None:
    """Every parameter of ``module`` drawn from N(0, scale²) (a fixed generator: the same draw every time)."""
    import torch

    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * scale)


def train_nmt(data_bin, save_dir, *arch_flags, max_update=20) -> Path:
    """The tiny NMT that the heads trained on a frozen one (``--nmt-path``) and the decoding tests start from:
    ``rnnsearch_tiny arch_flags``, ``max_update`` MLE updates (translation_decoding, cross_entropy)."""
    return train(data_bin, save_dir, ["--arch", "rnnsearch_tiny", *arch_flags], task="translation_decoding",
                 criterion="cross_entropy", max_update=max_update)


def generate(data_bin, ckpt, *args, task="translation_ext", **kw) -> str:
    """``fairseq-generate`` on the test split; returns stdout (S/T/H/D/P lines)."""
    p = fairseq("generate", data_bin, "--task", task, "--path", ckpt, "--cpu",
                "--beam", "2", "--max-len-b", "50", *args, **kw)
    return p.stdout


def hypotheses(out: str) -> dict:
    """``{sentence id: hypothesis}`` from fairseq-generate stdout (H lines)."""
    hyps = {}
    for line in out.splitlines():
        m = re.match(r"^H-(\d+)\t(\S+)\t(.*)$", line)
        if m:
            hyps[int(m.group(1))] = m.group(3)
    return hyps


def train_losses(stderr: str) -> list:
    """The training loss of every ``train_inner`` interval of a fairseq-train output."""
    from fairseq_ext.tools.evaluation.fairseq_log import train_losses as losses

    return losses(stderr)


def n_lines(path) -> int:
    with open(path, encoding="utf-8") as f:
        return sum(1 for _ in f)


def write_lines(path: Path, lines) -> Path:
    """``lines`` one a line at ``path`` (parents made); returns ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(x + "\n" for x in lines), encoding="utf-8")
    return path


def assert_same_checkpoints(path_a, path_b, num_updates: int):
    """Both checkpoints at ``num_updates`` with bit-identical parameters and optimiser state (a run killed and
    resumed against one run at once); returns the two loaded states."""
    import torch

    a = torch.load(path_a, map_location="cpu", weights_only=False)
    b = torch.load(path_b, map_location="cpu", weights_only=False)
    assert a["optimizer_history"][-1]["num_updates"] == b["optimizer_history"][-1]["num_updates"] == num_updates
    assert a["model"].keys() == b["model"].keys()
    for k in a["model"]:
        assert torch.equal(a["model"][k], b["model"][k]), k
    sa, sb = a["last_optimizer_state"]["state"], b["last_optimizer_state"]["state"]
    assert sa.keys() == sb.keys()
    for i in sa:
        for key in sa[i]:
            assert torch.equal(torch.as_tensor(sa[i][key]), torch.as_tensor(sb[i][key]))
    return a, b


# ----------------------------------------------------------------------------- model unit tests
def make_dictionary(vocab_size: int = 60):
    """A fairseq Dictionary with exactly ``vocab_size`` symbols (4 specials + w0, w1, ...)."""
    from fairseq.data import Dictionary

    d = Dictionary()
    for i in range(vocab_size - len(d)):
        d.add_symbol(f"w{i}")
    assert len(d) == vocab_size
    return d


def toy_task(vocab: int = 60, tgt_vocab=None, **attrs):
    """The attributes of a translation task a model's ``build_model`` reads: :func:`make_dictionary` on both
    sides (``tgt_vocab`` symbols on the target side if given), plus ``attrs`` (e.g. ``cfg``)."""
    import types

    d = make_dictionary(vocab)
    return types.SimpleNamespace(source_dictionary=d,
                                 target_dictionary=d if tgt_vocab is None else make_dictionary(tgt_vocab), **attrs)


def copy_task(vocab: int = 60, slots: int = 5, tgt_vocab=None):
    """:func:`toy_task` as ``copy_translation`` gives it to a CopyNet: ``slots`` copy slots (``--max-source-oovs``)."""
    import types

    return toy_task(vocab, tgt_vocab, cfg=types.SimpleNamespace(max_source_oovs=slots))


def arch_args(arch: str, /, **kw):
    """``kw`` completed by the architecture function of the registered ``arch`` (what fairseq-train applies after
    parsing). The namespace holds only ``kw`` and the defaults: pass ``arch=`` to record the name too."""
    import argparse

    from fairseq.models import ARCH_CONFIG_REGISTRY

    import fairseq_ext  # noqa: F401  (registers the plugin)

    args = argparse.Namespace(**kw)
    ARCH_CONFIG_REGISTRY[arch](args)
    return args


def model_and_args(arch: str, vocab: int = 60, seed=0, device=None, task=None, **kw):
    """``(model, args)``: the registered architecture ``arch`` built the way fairseq-train builds it, from keyword
    args (:func:`arch_args`, then the model class's ``build_model``), in training mode.

    ``task``: what ``build_model`` reads (default :func:`toy_task` of ``vocab``). ``seed``: ``torch.manual_seed``
    first (None: the random state as it is). ``device="meta"`` builds without memory or initialisation: enough to
    count the parameters of a thesis-size model."""
    import contextlib

    import torch
    from fairseq.models import ARCH_MODEL_REGISTRY

    if seed is not None:
        torch.manual_seed(seed)
    args = arch_args(arch, arch=arch, **kw)
    task = toy_task(vocab) if task is None else task
    with torch.device(device) if device else contextlib.nullcontext():
        return ARCH_MODEL_REGISTRY[arch].build_model(args, task), args


def build_model(arch: str, vocab: int = 60, seed=0, device=None, task=None, **kw):
    """:func:`model_and_args`'s model, in eval mode."""
    return model_and_args(arch, vocab=vocab, seed=seed, device=device, task=task, **kw)[0].eval()


def train_parse(*argv):
    """``argv`` parsed by fairseq-train's parser with the architecture's defaults (``parse_args_and_arch``)."""
    from fairseq import options

    import fairseq_ext  # noqa: F401  (registers the plugin; a --user-dir in argv loads the same package)

    return options.parse_args_and_arch(options.get_training_parser(), [str(a) for a in argv])


def build_parsed(arch: str, *flags, vocab: int = 60, seed: int = 0, task=None):
    """The registered architecture ``arch`` built from command-line ``flags`` parsed exactly as fairseq-train parses
    them (every option's default, then the architecture's: :func:`train_parse`), ``torch.manual_seed(seed)`` just
    before it is built; ``task`` as in :func:`model_and_args`. In eval mode."""
    import torch
    from fairseq.models import ARCH_MODEL_REGISTRY

    args = train_parse("/nonexistent", "--arch", arch, *flags)
    torch.manual_seed(seed)
    return ARCH_MODEL_REGISTRY[arch].build_model(args, toy_task(vocab) if task is None else task).eval()


def train_objects(*argv, seed=None):
    """``(cfg, task, model, criterion)`` of ``fairseq-train argv`` exactly as fairseq-train builds them (parse, the
    omegaconf config, ``setup_task``, ``task.build_model``, ``task.build_criterion``), in process. ``seed``:
    ``torch.manual_seed`` just before the model is built."""
    import torch
    from fairseq import tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    cfg = convert_namespace_to_omegaconf(train_parse(*argv))
    task = tasks.setup_task(cfg.task)
    if seed is not None:
        torch.manual_seed(seed)
    model = task.build_model(cfg.model)
    return cfg, task, model, task.build_criterion(cfg.criterion)


def lstm_lm_checkpoint(path, dictionary, seed: int, emb: int = 8, hidden: int = 6, layers: int = 1):
    """A stock fairseq ``lstm_lm`` (untrained, ``seed``) on ``dictionary`` saved as a checkpoint at ``path`` (the
    sentence-vector language models of the document models); returns the model, in eval mode."""
    import argparse
    import types

    import torch
    from fairseq.models.lstm_lm import LSTMLanguageModel, base_architecture

    torch.manual_seed(seed)
    args = argparse.Namespace(decoder_embed_dim=emb, decoder_hidden_size=hidden, decoder_layers=layers,
                              decoder_out_embed_dim=hidden, dropout=0.0, criterion="cross_entropy",
                              max_target_positions=64, tokens_per_sample=64)
    base_architecture(args)
    lm = LSTMLanguageModel.build_model(args, types.SimpleNamespace(dictionary=dictionary,
                                                                   target_dictionary=dictionary)).eval()
    torch.save({"model": lm.state_dict(), "args": args, "cfg": None}, path)
    return lm


def n_params(model) -> int:
    return sum(p.numel() for p in model.parameters())


def toy_batch(bsz=3, src_len=7, tgt_len=6, vocab=60, seed=1):
    """``(src_tokens, src_lengths, prev_output_tokens)``: random tokens, one left-padded source
    (fairseq's default left_pad_source), sources end in EOS, decoder inputs start with EOS."""
    import torch

    g = torch.Generator().manual_seed(seed)
    src = torch.randint(4, vocab, (bsz, src_len), generator=g)
    src[0, :2] = 1
    src[:, -1] = 2
    tgt = torch.randint(4, vocab, (bsz, tgt_len), generator=g)
    tgt[:, 0] = 2
    return src, src.ne(1).sum(1), tgt


def beam_toy_batch(beam: int = 3):
    """Two :func:`toy_batch` sources (one left-padded), each repeated ``beam`` times, with different target
    prefixes: the rows of a beam search (for :func:`beam_incremental`)."""
    src, lengths, _ = toy_batch(bsz=2)
    _, _, tgt = toy_batch(bsz=2 * beam, seed=5)
    return src.repeat_interleave(beam, 0), lengths.repeat_interleave(beam, 0), tgt


def incremental_logits(model, src, lengths, prev):
    """Decoder logits computed one step at a time with an incremental state (B,T,V), to compare with
    the full (teacher-forced) forward pass."""
    import torch

    enc = model.encoder(src, src_lengths=lengths)
    state, outs = {}, []
    for t in range(prev.size(1)):
        outs.append(model.decoder(prev[:, : t + 1], encoder_out=enc, incremental_state=state)[0])
    return torch.cat(outs, dim=1)


def beam_incremental(model, src, lengths, tgt, beam=None):
    """Decoding step by step with an incremental state, as fairseq's generator does: ``(outputs (B, T, C), src,
    lengths, tgt, incremental state)``. With ``beam`` the rows are groups of ``beam`` hypotheses of one source,
    re-selected within their group (with repetition; a fixed generator) after each step as beam search does, and
    the inputs come back in the final order."""
    import torch

    g = torch.Generator().manual_seed(3)
    outs, state = [], {}
    bsz = tgt.size(0)
    with torch.no_grad():
        enc = model.encoder(src, lengths)
        for t in range(tgt.size(1)):
            out, _ = model.decoder(tgt[:, : t + 1], enc, incremental_state=state)
            assert out.size(1) == 1
            outs.append(out[:, -1])
            if beam:
                order = torch.arange(bsz) // beam * beam + torch.randint(0, beam, (bsz,), generator=g)
                tgt, src, lengths = tgt[order], src[order], lengths[order]
                outs = [o[order] for o in outs]
                model.decoder.reorder_incremental_state_scripting(state, order)
                enc = model.encoder.reorder_encoder_out(enc, order)
    return torch.stack(outs, 1), src, lengths, tgt, state


def incremental_reordered(model, enc, prev, order=None, at: int = 3):
    """Step-by-step decoding with an incremental state; with ``order`` the rows are re-selected before step ``at``
    as beam search does (encoder output, incremental state, inputs, outputs so far): ``(outputs (B, T, C), the
    row order, the reordered inputs)``. Call it under ``torch.no_grad()``."""
    import torch

    state, outs = {}, []
    for t in range(prev.size(1)):
        if order is not None and t == at:
            idx = torch.tensor(order)
            enc = model.encoder.reorder_encoder_out(enc, idx)
            model.decoder.reorder_incremental_state_scripting(state, idx)
            prev, outs = prev.index_select(0, idx), [o.index_select(0, idx) for o in outs]
        outs.append(model.decoder(prev[:, : t + 1], encoder_out=enc, incremental_state=state)[0])
    idx = torch.arange(prev.size(0)) if order is None else torch.tensor(order)
    return torch.cat(outs, 1), idx, prev


def toy_arthur_lexicon(path, vocab: int = 60, k: int = 3, seed: int = 0) -> str:
    """Write a random Arthur lexicon (``--arthur-lexicon``) for :func:`make_dictionary` (``vocab``) on
    both sides: k target types per regular source type with probabilities summing to < 1."""
    import torch

    from fairseq_ext.tools.corpora.arthur_lexicon import save_lexicon

    g = torch.Generator().manual_seed(seed)
    d = make_dictionary(vocab)
    rows = torch.arange(d.nspecial, vocab).repeat_interleave(k)
    cols = torch.stack([torch.randperm(vocab - d.nspecial, generator=g)[:k] + d.nspecial
                        for _ in range(vocab - d.nspecial)]).flatten()
    probs = torch.rand(vocab - d.nspecial, k, generator=g)
    probs = (0.9 * probs / probs.sum(1, keepdim=True)).flatten()
    save_lexicon(str(path), torch.stack([rows, cols]), probs, d, d)
    return str(path)


def thesis_commands(recipe, **env) -> list:
    """The commands a recipe prints in ``MODE=thesis`` (its ``+ `` lines; every other line is a ``# `` comment)."""
    p = run(["bash", recipe], timeout=120, MODE="thesis", **env)
    assert all(ln.startswith(("+ ", "# ")) for ln in p.stdout.splitlines())
    return [ln for ln in p.stdout.splitlines() if ln.startswith("+ ")]


def parse_fairseq_command(line: str):
    """(tool, parsed args) of a printed ``+ fairseq-{train,generate,preprocess} ...`` line with fairseq's own
    parser (``--user-dir fairseq_ext`` resolved to the repository's plugin); None for any other tool."""
    from fairseq import options

    toks = shlex.split(line[2:])
    tool = os.path.basename(toks[0])
    args = [str(ROOT / "fairseq_ext") if a == "fairseq_ext" else a for a in toks[1:]]
    if tool == "fairseq-train":
        return tool, train_parse(*args)
    if tool == "fairseq-generate":
        return tool, options.parse_args_and_arch(options.get_generation_parser(), args)
    if tool == "fairseq-preprocess":
        return tool, options.get_preprocessing_parser().parse_args(args)
    return None


# ----------------------------------------------------------------------------- Gu ch. 5-6: marked languages
# Three toy "languages" written as ciphers of English words: auxiliary aa and bb, low-resource cc.
UNI_LANGS = ["aa", "bb", "cc"]
UNI_CIPHER = {"aa": lambda w: w[::-1], "bb": lambda w: w.upper(), "cc": lambda w: "x" + w}


def marked_dictionary(words=("casa", "gato", "perro"), langs=UNI_LANGS):
    """A source Dictionary of marked pieces ``<cipher(word)>__<lang>`` for every language and word."""
    from fairseq.data import Dictionary

    d = Dictionary()
    for lang in langs:
        for w in words:
            d.add_symbol(f"{UNI_CIPHER[lang](w)}__{lang}")
    return d


def universal_task(d, langs=UNI_LANGS, data=None):
    """The attributes of ``universal_translation`` a model reads (the last language is the low-resource one)."""
    import types

    from fairseq_ext.data.universal import token_languages

    return types.SimpleNamespace(source_dictionary=d, target_dictionary=d, langs=list(langs),
                                 aux_langs=list(langs[:-1]), token_lang=token_languages(d, langs),
                                 cfg=types.SimpleNamespace(data=data))


def ulr_dir(root: Path, d, m: int = 10, dq: int = 6, seed: int = 0, alpha_every: int = 0) -> Path:
    """Random unit query/key arrays for dictionary ``d`` in ``root/ulr`` (the files of fairseq-ext-ulr project);
    alpha True for every ``alpha_every``-th marked symbol (0: none)."""
    import numpy as np

    g = np.random.default_rng(seed)
    q = g.normal(size=(len(d), dq)).astype(np.float32)
    q[: d.nspecial] = 0
    q /= np.maximum(np.linalg.norm(q, axis=1, keepdims=True), 1e-9)
    k = g.normal(size=(m, dq)).astype(np.float32)
    k /= np.linalg.norm(k, axis=1, keepdims=True)
    alpha = np.zeros(len(d), dtype=bool)
    if alpha_every:
        alpha[d.nspecial::alpha_every] = True
    out = Path(root) / "ulr"
    out.mkdir(exist_ok=True)
    np.save(out / "query.npy", q)
    np.save(out / "key.npy", k)
    np.save(out / "alpha.npy", alpha)
    return out


def universal_corpus(root: Path, n_low: int = 40, n_valid=None, n_test=None, m: int = 50, dq: int = 8) -> Path:
    """aa, bb (ciphers of the tiny Bible's English training lines after the first ``n_low``) and the low-resource
    cc (the first ``n_low``), binarized as ``universal_translation`` reads it (``.lang`` side files, a
    manifest), with random ULR files; valid/test are cc. Returns the ``bin`` folder."""
    import json

    from fairseq.data import Dictionary

    root = Path(root)
    seg = root / "spm"
    seg.mkdir(parents=True, exist_ok=True)
    en = {sp: (TINY / f"{sp}.en").read_text(encoding="utf-8").lower().split("\n")[:-1]
          for sp in ("train", "valid", "test")}

    def mark(line, lang):
        return " ".join(f"{UNI_CIPHER[lang](w)}__{lang}" for w in line.split())

    rows = {"train": [(lang, e) for lang in ("aa", "bb") for e in en["train"][n_low:]]
            + [("cc", e) for e in en["train"][:n_low]],
            "valid": [("cc", e) for e in en["valid"][:n_valid]], "test": [("cc", e) for e in en["test"][:n_test]]}
    for sp, items in rows.items():
        (seg / f"{sp}.src").write_text("".join(mark(e, lang) + "\n" for lang, e in items), encoding="utf-8")
        (seg / f"{sp}.en").write_text("".join(e + "\n" for _, e in items), encoding="utf-8")
    binp = root / "bin"
    fairseq("preprocess", "--source-lang", "src", "--target-lang", "en", "--trainpref", seg / "train",
            "--validpref", seg / "valid", "--testpref", seg / "test", "--destdir", binp, "--workers", "1",
            user_dir=False)
    for sp, items in rows.items():
        (binp / f"{sp}.lang").write_text("".join(lang + "\n" for lang, _ in items), encoding="utf-8")
    (root / "manifest.json").write_text(json.dumps({"aux": ["aa", "bb"], "lowres": "cc", "target": "en"}))
    ulr_dir(root, Dictionary.load(str(binp / "dict.src.txt")), m=m, dq=dq)
    return binp


def rebuilt_without_ulr_folder(model, args, task):
    """``model``'s class built again from ``args`` with ``--ulr-dir`` pointing nowhere (inference from a checkpoint
    whose ULR folder is gone: zero buffers of the recorded shapes), loaded with ``model``'s state; both in eval mode."""
    import copy

    args = copy.copy(args)
    args.ulr_dir = "/nonexistent/ulr"
    rebuilt = type(model).build_model(args, task)
    rebuilt.load_state_dict(model.state_dict())
    return model.eval(), rebuilt.eval()
