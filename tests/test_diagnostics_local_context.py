"""The local-context baselines of Maruf's ch. 3-4 in the document-context diagnostic (recipes/bench/diagnostics.py):
the HAN encoder and decoder (Miculicich et al. 2018; the decoder reads the gold translations) and Wang et al. (2017)
are antecedent systems whose 3 previous sentences cover d = 1-3, each at its family's stage-1 shape (the warm start
copies every sentence tensor), and (slow) each resolves the antecedent on a short run of the runner."""
import json
import subprocess
import sys

import pytest

from harness import ROOT, env, toy_task, train_parse

NEW = {"han_enc": "transformer_han", "han_dec": "transformer_han", "wang2017": "docmem_wang2017"}  # system -> model


def runner():
    from fairseq_ext.tools.analysis import diagnostics_systems

    return diagnostics_systems


def build(mod, flags, fam):
    import torch
    from fairseq.models import ARCH_MODEL_REGISTRY

    args = train_parse("/nonexistent", *mod.TASK_FLAGS, *flags, *mod.SHAPES[fam])
    torch.manual_seed(0)
    return ARCH_MODEL_REGISTRY[args.arch].build_model(args, toy_task(48)), args


@pytest.mark.parametrize("name", sorted(NEW))
def test_the_local_context_baselines_are_antecedent_systems_at_their_family_shape(name):
    """Registered in the runner's antecedent table, resolvable d = 1, 2, 3 (their previous sentences); the document
    model holds every tensor of its family's stage-1 sentence model with the same shape (so
    ``--finetune-from-model`` copies them all)."""
    from fairseq.models import ARCH_MODEL_REGISTRY, MODEL_REGISTRY

    mod = runner()
    entry = next(e for e in mod.SYSTEMS["antecedent"] if e[0] == name)
    _, fam, flags, resolvable, _ = entry
    assert resolvable == ["1", "2", "3"]
    doc, args = build(mod, flags, fam)
    assert type(doc) is MODEL_REGISTRY[NEW[name]] and ARCH_MODEL_REGISTRY[args.arch] is MODEL_REGISTRY[NEW[name]]
    assert args.ctx_prev_sentences == 3
    sent, _ = build(mod, mod.FAMILIES[fam], fam)
    doc_state = doc.state_dict()
    sent_state = sent.state_dict()
    assert sent_state and all(k in doc_state and doc_state[k].shape == v.shape for k, v in sent_state.items()), \
        [k for k, v in sent_state.items() if k not in doc_state or doc_state[k].shape != v.shape]


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(NEW))
def test_local_context_baseline_resolves_the_antecedent(tmp_path, name):
    """recipes/bench/diagnostics.py, antecedent, the RESULTS.md budget (1,000 + 2,000 updates; ~15-25 min each on one
    thread beside other runs): accuracy >= 0.9 at d = 1, 2, 3 with a positive margin, and with the context
    switched off (--doc-max-context 0) the bound exactly (margin 0, accuracy <= 0.5)."""
    out = tmp_path / "diag"
    p = subprocess.run([sys.executable, "recipes/bench/diagnostics.py", "--tasks", "antecedent", "--systems", name,
                        "--stage1-updates", "1000", "--stage2-updates", "2000", "--curve-every", "0",
                        "--extend-failing", "0", "--out", str(out), "--table", ""], cwd=ROOT, env=env(),
                       capture_output=True, text=True, timeout=3600)
    assert p.returncode in (0, 1), p.stderr[-3000:]
    row = json.loads((out / "antecedent" / name / "result.json").read_text())
    assert row["margin"] > 0.5 and all(row["by_bucket"][b] >= 0.9 for b in ("1", "2", "3")), row
    assert abs(row["context_off"]["margin"]) < 1e-3 and row["context_off"]["accuracy"] <= 0.5, row
    assert row["pass"]
