"""The published contrastive sets (fairseq_ext.tools.evaluation.contrastive_sets): ContraPro (JSON + documents, or the text
files of json2text_and_context.pl) and Bawden et al. 2018 (anaphora / lexical-choice JSON, or the text files of
json2rawtext.py), small sets written in each format; accuracy with a stub scorer whose scores are chosen (worked
out by hand below), then the same sets scored through fairseq's loading path with a tiny model."""
import json
import math

import pytest

from fairseq_ext.tools.evaluation import contrastive as C
from fairseq_ext.tools.evaluation import contrastive_sets as CS
from fairseq_ext.tools.common import ToolError, cli_status, read_jsonl

# ----------------------------------------------------------------------------------------------- the sets
DOC_A = [("El rey habló.", "The king spoke."), ("La mujer vino.", "The woman came."),
         ("Ella le dio pan.", "She gave him bread."), ("Él comió.", "He ate.")]
DOC_B = [("El siervo fue.", "The servant went."), ("Su madre lloró.", "His mother wept."),
         ("Le vio.", "She saw him.")]

# (document, segment id, ante distance, src pronoun, ref pronoun, contrastive translations)
CONTRAPRO = [
    ("2008_1_1.en", 3, 1, "ella", "she", ["He gave him bread."]),
    ("2008_1_1.en", 1, 0, "el", "the", ["The queen spoke.", "A king spoke."]),
    ("2009_2_2.en", 2, 1, "su", "his", ["Her mother wept."]),
    ("2009_2_2.en", 3, 5, "le", "him", ["She saw her."]),
]


def write_contrapro(tmp_path):
    """The JSON set, its documents (docs/<year>/<name>.{es,en}) and the text files that
    ``json2text_and_context.pl --context 1`` writes for it."""
    docs = {"2008_1_1": DOC_A, "2009_2_2": DOC_B}
    for name, lines in docs.items():
        d = tmp_path / "docs" / name[:4]
        d.mkdir(parents=True, exist_ok=True)
        (d / f"{name}.es").write_text("".join(s + "\n" for s, _ in lines), encoding="utf-8")
        (d / f"{name}.en").write_text("".join(t + "\n" for _, t in lines), encoding="utf-8")
    entries, text, ctx = [], {"es": [], "en": []}, {"es": [], "en": []}
    for doc, seg, dist, sp, rp, errors in CONTRAPRO:
        lines = docs[doc[:-3]]
        src, ref = lines[seg - 1]
        entries.append({"segment id": seg, "ante distance": dist, "document id": doc, "src segment": src,
                        "ref segment": ref, "src pronoun": sp, "ref pronoun": rp, "intrasegmental": dist == 0,
                        "errors": [{"type": "pronominal coreference", "replacement": "x", "contrastive": c}
                                   for c in errors]})
        prev = lines[seg - 2] if seg > 1 else ("", "")
        for tgt in [ref] + errors:
            ctx["es"].append(prev[0])
            ctx["en"].append(prev[1])
            text["es"].append(src)
            text["en"].append(tgt)
    js = tmp_path / "contrapro.json"
    js.write_text(json.dumps(entries, ensure_ascii=False, indent=1), encoding="utf-8")
    for kind, d in (("text", text), ("context", ctx)):
        for lang, lines in d.items():
            (tmp_path / f"contrapro.{kind}.{lang}").write_text("".join(x + "\n" for x in lines), encoding="utf-8")
    return js


ANAPHORA = {
    "1": {"src": ["The buildings are finished.", "They are full."],
          "trg": [{"correct": ["Los edificios terminaron.", "Ellos están llenos."],
                   "incorrect": ["Los edificios terminaron.", "Ellas están llenas."]},
                  {"semi-correct": ["Las casas terminaron.", "Ellas están llenas."],
                   "incorrect": ["Las casas terminaron.", "Ellos están llenos."]}]},
    "2": {"src": ["I saw the king.", "He was tired."],
          "trg": [{"correct": ["Vi al rey.", "Y él estaba cansado."],
                   "incorrect": ["Vi al rey.", "Y ella estaba cansada."]}]},
}
LEXICAL = {"1": {"type": "disambig", "examples": [
    {"src": ["The river is wide.", "He reached the bank."],
     "trg": {"correct": ["El río es ancho.", "Llegó a la orilla."],
             "incorrect": ["El río es ancho.", "Llegó al banco."]}},
    {"src": ["He needed money.", "He reached the bank."],
     "trg": {"correct": ["Necesitaba dinero.", "Llegó al banco."],
             "incorrect": ["Necesitaba dinero.", "Llegó a la orilla."]}}]}}


def write_bawden(tmp_path):
    """anaphora.json, lexical-choice.json and the anaphora files of ``json2rawtext.py`` (en source, es target)."""
    (tmp_path / "anaphora.json").write_text(json.dumps(ANAPHORA, ensure_ascii=False), encoding="utf-8")
    (tmp_path / "lexical-choice.json").write_text(json.dumps(LEXICAL, ensure_ascii=False), encoding="utf-8")
    files = {k: [] for k in ("current.en", "prev.en", "current.es", "prev.es")}
    for key in sorted(ANAPHORA, key=int):
        b = ANAPHORA[key]
        for t in b["trg"]:
            good = t.get("correct") or t.get("semi-correct")
            for _ in range(2):
                files["current.en"].append(b["src"][1])
                files["prev.en"].append(b["src"][0])
            for cand in (good, t["incorrect"]):
                files["current.es"].append(cand[1])
                files["prev.es"].append(cand[0])
    for k, lines in files.items():
        (tmp_path / f"anaphora.{k}").write_text("".join(x + "\n" for x in lines), encoding="utf-8")
    return tmp_path / "anaphora.json", tmp_path / "lexical-choice.json", str(tmp_path / "anaphora")


# Stub scores chosen per candidate (higher = better).
#   ContraPro  1 (distance 1, she:she... "ella:she"): ref -1.0 > -2.0                    correct
#              2 (distance 0, "el:the"):               ref -1.0 < -0.5 (2nd contrastive)  wrong
#              3 (distance 1, "su:his"):               ref -2.0 = -2.0 (a tie is wrong)    wrong
#              4 (distance 5 -> ">3", "le:him"):        ref -0.1 > -4.0                    correct
#   -> overall 2/4 = 0.5; by distance: 0: 0/1, 1: 1/2, >3: 1/1; by category: each 1 instance, ella:she 1, el:the 0,
#      su:his 0, le:him 1.
CONTRAPRO_SCORES = {"She gave him bread.": -1.0, "He gave him bread.": -2.0,
                    "The king spoke.": -1.0, "The queen spoke.": -3.0, "A king spoke.": -0.5,
                    "His mother wept.": -2.0, "Her mother wept.": -2.0,
                    "She saw him.": -0.1, "She saw her.": -4.0}
#   Bawden anaphora  1.1 (correct):      -1.0 > -2.0   correct
#                    1.2 (semi-correct): -3.0 < -1.0   wrong
#                    2.1 (correct):      -1.0 > -1.5   correct
#   -> 2/3; distance 1: 2/3; correct 2/2, semi-correct 0/1.
BAWDEN_SCORES = {("Ellos están llenos.", "Los edificios terminaron."): -1.0,
                 ("Ellas están llenas.", "Los edificios terminaron."): -2.0,
                 ("Ellas están llenas.", "Las casas terminaron."): -3.0,
                 ("Ellos están llenos.", "Las casas terminaron."): -1.0,
                 ("Y él estaba cansado.", "Vi al rey."): -1.0, ("Y ella estaba cansada.", "Vi al rey."): -1.5}


def chosen(instances, table, with_context=False):
    return [[table[(c, x["context_tgt"][0]) if with_context else c] for c in x["candidates"]] for x in instances]


# ----------------------------------------------------------------------------------------------- readers
def test_contrapro_documents_and_text_files_give_the_same_instances(tmp_path):
    js = write_contrapro(tmp_path)
    from_docs = CS.read_set("contrapro", str(js), docs=str(tmp_path / "docs"), langs=("es", "en"))
    from_text = CS.read_set("contrapro", str(js), text_prefix=str(tmp_path / "contrapro"), langs=("es", "en"))
    assert from_docs == from_text
    x = from_docs[0]
    assert x["source"] == "Ella le dio pan." and x["candidates"] == ["She gave him bread.", "He gave him bread."]
    assert (x["context_src"], x["context_tgt"], x["distance"], x["category"]) == (
        ["La mujer vino."], ["The woman came."], 1, "ella:she")
    assert from_docs[1]["context_src"] == [] and len(from_docs[1]["candidates"]) == 3   # first line of its document
    two = CS.read_set("contrapro", str(js), docs=str(tmp_path / "docs"), context=2, langs=("es", "en"))
    assert two[0]["context_src"] == ["El rey habló.", "La mujer vino."] and two[2]["context_tgt"] == ["The servant went."]


def test_contrapro_accuracy_with_chosen_scores(tmp_path):
    js = write_contrapro(tmp_path)
    xs = CS.read_set("contrapro", str(js), docs=str(tmp_path / "docs"), langs=("es", "en"))
    res = CS.set_accuracy(xs, chosen(xs, CONTRAPRO_SCORES))
    assert res["overall"] == {"correct": 2, "total": 4, "accuracy": 0.5}
    assert list(res["by_distance"]) == ["0", "1", ">3"]
    assert [res["by_distance"][b]["accuracy"] for b in ("0", "1", ">3")] == [0.0, 0.5, 1.0]
    assert {c: v["correct"] for c, v in res["by_category"].items()} == {"ella:she": 1, "el:the": 0, "su:his": 0,
                                                                       "le:him": 1}
    table = CS.format_set_accuracy(res, "stub")
    assert "| Model | 0 | 1 | >3 | all |" in table and "| stub | 0.000 | 0.500 | 1.000 | 0.500 |" in table


def test_bawden_json_text_and_accuracy(tmp_path):
    ana, lex, prefix = write_bawden(tmp_path)
    xs = CS.read_set("bawden", str(ana), langs=("en", "es"))
    assert [x["id"] for x in xs] == ["1.1", "1.2", "2.1"] and {x["distance"] for x in xs} == {1}
    assert [x["category"] for x in xs] == ["correct", "semi-correct", "correct"]
    assert xs[1]["context_tgt"] == ["Las casas terminaron."] and xs[1]["candidates"][0] == "Ellas están llenas."
    text = CS.read_set("bawden", None, text_prefix=prefix, langs=("en", "es"))
    assert [(x["source"], x["candidates"], x["context_src"], x["context_tgt"]) for x in text] == \
        [(x["source"], x["candidates"], x["context_src"], x["context_tgt"]) for x in xs]
    res = CS.set_accuracy(xs, chosen(xs, BAWDEN_SCORES, with_context=True))
    assert res["overall"]["correct"] == 2 and res["overall"]["accuracy"] == pytest.approx(2 / 3)
    assert res["by_distance"]["1"]["accuracy"] == pytest.approx(2 / 3)
    assert res["by_category"]["correct"]["accuracy"] == 1.0 and res["by_category"]["semi-correct"]["accuracy"] == 0.0
    lx = CS.read_set("bawden", str(lex), langs=("en", "es"))
    assert [x["category"] for x in lx] == ["disambig", "disambig"] and lx[1]["context_src"] == ["He needed money."]


def test_bad_sets_are_one_error_naming_the_file(tmp_path):
    js = write_contrapro(tmp_path)
    docs = str(tmp_path / "docs")
    entries = json.loads(js.read_text())
    entries[2]["src segment"] = "Otra frase."
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(entries, ensure_ascii=False))
    with pytest.raises(ToolError, match=r"2009_2_2\.es:2: is not the 'src segment' of instance 3"):
        CS.read_set("contrapro", str(bad), docs=docs, langs=("es", "en"))
    del entries[0]["errors"]
    bad.write_text(json.dumps(entries))
    with pytest.raises(ToolError, match="instance 1 has no 'errors'"):
        CS.read_set("contrapro", str(bad), docs=docs, langs=("es", "en"))
    with pytest.raises(ToolError, match="--docs DIR or --text-prefix"):
        CS.read_set("contrapro", str(js), langs=("es", "en"))
    lines = (tmp_path / "contrapro.text.es").read_text().splitlines()
    (tmp_path / "contrapro.text.es").write_text("\n".join(lines[:-1]) + "\n")
    with pytest.raises(ToolError, match=r"contrapro\.text\.es: 8 lines, but the 4 instances"):
        CS.read_set("contrapro", str(js), text_prefix=str(tmp_path / "contrapro"), langs=("es", "en"))
    _, _, prefix = write_bawden(tmp_path)
    cur = (tmp_path / "anaphora.prev.es").read_text().splitlines()
    cur[1] = "Otra."
    (tmp_path / "anaphora.prev.es").write_text("\n".join(cur) + "\n")
    with pytest.raises(ToolError, match=r"anaphora\.prev\.es:2: the two lines of a pair differ"):
        CS.read_set("bawden", None, text_prefix=prefix, langs=("en", "es"))
    assert cli_status(C.main, ["score", "--format", "bawden", "--set", str(tmp_path / "nope.json"), "DATA",
                               "--path", "x.pt"]) == 2


# ----------------------------------------------------------------------------------------------- scoring
@pytest.fixture(scope="module")
def tiny_model(tiny_bin, tmp_path_factory):
    from harness import train

    return train(tiny_bin, tmp_path_factory.mktemp("sent"), task="translation", max_update=5)


def stub_factory(table, seen=None):
    """A scorer that reads back the text of every candidate row and returns its chosen score (and, for Bawden et
    al.'s pairs, whose candidates repeat across pairs, the text of the row's context line: the line before it):
    the bookkeeping of the real path (split, dataset, collater, row mapping) with known scores."""
    def factory(models, task):
        d, ds = task.target_dictionary, task.dataset("test")

        def text(tokens):
            return d.string(tokens[tokens.ne(d.pad())], "sentencepiece")

        def scorer(sample):
            if seen is not None:
                seen.append(sample["net_input"].get("ctx_index"))
            rows = range(sample["target"].size(0))
            if isinstance(next(iter(table)), tuple):
                return [table[text(sample["target"][r]), text(ds[int(sample["id"][r]) - 1]["target"])] for r in rows]
            return [table[text(sample["target"][r])] for r in rows]
        return scorer
    return factory


def test_stub_scores_through_fairseq_loading(tiny_bin, tiny_model, tmp_path):
    """The chosen scores above, returned by a stub in place of the model, give the hand-computed accuracies through
    the whole path: the instances written as a split of a copy of the data folder, loaded by the task (also
    doc_translation, whose batches carry each instance's context), collated and mapped back row by row."""
    spm = str(tiny_bin.parent / "seg" / "spm.model")
    js = write_contrapro(tmp_path)
    xs = CS.read_set("contrapro", str(js), docs=str(tmp_path / "docs"), langs=("es", "en"))
    base = [str(tiny_bin), "--path", str(tiny_model), "--cpu"]
    res = CS.score_external_set(xs, base + ["--task", "translation"], spm=spm,
                                scorer_factory=stub_factory(CONTRAPRO_SCORES))
    assert res["overall"]["accuracy"] == 0.5 and res["by_distance"]["1"]["accuracy"] == 0.5
    assert res["context_sentences"] == {0: 1, 1: 3}
    seen = []
    res = CS.score_external_set(xs, base + ["--task", "doc_translation", "--doc-context-mode", "online"], spm=spm,
                                per_batch=2, scorer_factory=stub_factory(CONTRAPRO_SCORES, seen=seen))
    assert res["overall"]["correct"] == 2 and res["by_distance"][">3"]["accuracy"] == 1.0
    # instances 1 and 2 in one batch: 2 + 3 rows; rows of instance 1 have one context sentence, instance 2 none
    assert seen[0].shape == (5, 1) and sorted((seen[0] >= 0).sum(1).tolist()) == [0, 0, 0, 1, 1]
    _, _, prefix = write_bawden(tmp_path)
    ys = CS.read_set("bawden", None, text_prefix=prefix, langs=("en", "es"))
    res = CS.score_external_set(ys, base + ["--task", "translation"], spm=spm, src_spm=spm,
                                scorer_factory=stub_factory(BAWDEN_SCORES))
    assert res["overall"]["correct"] == 2 and res["overall"]["total"] == 3


def test_tiny_model_scores_contrapro_and_bawden_from_the_command_line(tiny_bin, tiny_model, tmp_path):
    """A real (tiny, 5-update) transformer: every candidate gets a finite log-probability, the accuracies count every
    instance, and a sentence model's scores do not depend on the context it is given (the same with 1 or 2
    context sentences, with the task ``translation`` or ``doc_translation``)."""
    spm = str(tiny_bin.parent / "seg" / "spm.model")
    js = write_contrapro(tmp_path)
    common = ["score", "--format", "contrapro", "--set", str(js), "--docs", str(tmp_path / "docs"), "--set-langs",
              "es-en", "--spm", spm, "--name", "tiny"]
    fairseq = [str(tiny_bin), "--path", str(tiny_model), "--cpu"]
    runs = {}
    for key, extra in (("sent", ["--task", "translation"]), ("doc2", ["--context", "2", "--task", "doc_translation",
                                                                      "--doc-target-context", "gold"])):
        det = tmp_path / f"{key}.jsonl"
        out = tmp_path / f"{key}.json"
        assert C.main(common + ["--json", str(out), "--details", str(det)] + fairseq + extra) == 0
        acc = json.loads(out.read_text())
        assert acc["overall"]["total"] == 4 and {b: v["total"] for b, v in acc["by_distance"].items()} == \
            {"0": 1, "1": 2, ">3": 1}
        runs[key] = read_jsonl(det)
        assert all(math.isfinite(v) and v < 0 for r in runs[key] for v in [r["reference_score"]] + r["contrastive_scores"])
        assert acc["overall"]["correct"] == sum(r["correct"] for r in runs[key])
    for a, b in zip(runs["sent"], runs["doc2"]):
        assert b["reference_score"] == pytest.approx(a["reference_score"], abs=1e-4)
        assert b["contrastive_scores"] == pytest.approx(a["contrastive_scores"], abs=1e-4)
    ana, _, _ = write_bawden(tmp_path)
    out = tmp_path / "bawden.json"
    assert C.main(["score", "--format", "bawden", "--set", str(ana), "--set-langs", "en-es", "--spm", spm,
                   "--json", str(out)] + fairseq + ["--task", "translation"]) == 0
    assert json.loads(out.read_text())["overall"]["total"] == 3


def test_load_for_scoring_prepares_models_for_inference(tiny_bin, tiny_model):
    """The scorer loads models as fairseq-generate does, prepare_for_inference_ included: ``--quantize int8``
    turns the Linear layers into int8 ones (the loader before skipped prepare_for_inference_, so the option did
    nothing there)."""
    from fairseq_ext.modules.fast_inference import Int8Linear, int8_engine_available

    if not int8_engine_available():
        pytest.skip("no fbgemm/x86 int8 engine")
    _, _, models, dataset, _ = C.load_for_scoring([str(tiny_bin), "--path", str(tiny_model), "--task", "translation",
                                                   "--cpu", "--quantize", "int8"])
    assert any(isinstance(m, Int8Linear) for m in models[0].modules()) and not models[0].training
    _, _, plain, _, _ = C.load_for_scoring([str(tiny_bin), "--path", str(tiny_model), "--task", "translation", "--cpu"])
    assert not any(isinstance(m, Int8Linear) for m in plain[0].modules()) and len(dataset) > 0


def test_every_model_loader_of_the_package_is_load_ensemble():
    """One loader: only fairseq_ext.modules.checkpoint calls fairseq's ensemble loaders and
    ``prepare_for_inference_`` (a shortened copy elsewhere once skipped ``prepare_for_inference_``, so ``--quantize``
    did nothing there)."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "fairseq_ext"
    pattern = re.compile(r"load_model_ensemble(_and_task)?\(|\.prepare_for_inference_\(")
    where = [str(p.relative_to(root)) for p in root.rglob("*.py") if pattern.search(p.read_text())]
    assert where == ["modules/checkpoint.py"]


def test_document_model_sees_the_context_of_the_set(tiny_bin, tmp_path):
    """A document model (selattn, decoder integration with the gold target context: ``uses_document_context``) gets
    each instance's context sentences: its scores change when the set gives it 2 context sentences instead of 1
    for the instances that have 2 (ContraPro 1 and 4), and not for those whose documents have no more (2 and 3)."""
    from harness import train

    shape = ["--encoder-layers", "1", "--decoder-layers", "1", "--encoder-embed-dim", "32",
             "--decoder-embed-dim", "32", "--encoder-ffn-embed-dim", "64", "--decoder-ffn-embed-dim", "64",
             "--encoder-attention-heads", "4", "--decoder-attention-heads", "4"]
    ckpt = train(tiny_bin, tmp_path / "doc", ["--arch", "selattn_dec_hier_sparsesparse_bench", *shape],
                 task="doc_translation", max_update=2, extra=["--doc-target-context", "gold", "--disable-validation"])
    spm = str(tiny_bin.parent / "seg" / "spm.model")
    js = write_contrapro(tmp_path)
    scores = {}
    for c in ("1", "2"):
        det = tmp_path / f"c{c}.jsonl"
        assert C.main(["score", "--format", "contrapro", "--set", str(js), "--docs", str(tmp_path / "docs"),
                       "--context", c, "--set-langs", "es-en", "--spm", spm, "--details", str(det), str(tiny_bin),
                       "--path", str(ckpt), "--task", "doc_translation", "--doc-target-context", "gold", "--cpu"]) == 0
        scores[c] = [[r["reference_score"]] + r["contrastive_scores"] for r in read_jsonl(det)]
    for k in (0, 3):   # 2 context sentences available: other scores
        assert scores["1"][k] != pytest.approx(scores["2"][k], abs=1e-6)
    for k in (1, 2):   # the first / second line of its document: the same context either way
        assert scores["1"][k] == pytest.approx(scores["2"][k], abs=1e-6)
