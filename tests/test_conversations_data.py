"""Bi-MSMT data (Maruf 2019 ch. 5): turn segmentation by language, the history a sentence may see, the
conversation batches, bad input, and the Bible conversation builder (speakers from the WEB's OSIS markup)."""
import subprocess
import sys
from collections import OrderedDict

import numpy as np
import pytest
import torch
from fairseq.data import LanguagePairDataset

from fairseq_ext.data.conversations import (
    ConversationDataError,
    ConversationIndex,
    ConversationPairDataset,
    add_history_keys,
    conversation_batches,
    segment_turns,
)
from fairseq_ext.tools.corpora import conversations as tool
from harness import ROOT, make_dictionary

FIXTURE = ROOT / "tests" / "data" / "conversations"


# ------------------------------------------------------------------------------------------ turns
@pytest.mark.parametrize("langs,turns", [
    ([0, 0, 1, 1, 1, 0], [(0, 2), (2, 5), (5, 6)]),
    ([1, 0, 1, 0], [(0, 1), (1, 2), (2, 3), (3, 4)]),  # starts with the second language: no parity
    (["es", "es", "en"], [(0, 2), (2, 3)]),
    ([0], [(0, 1)]),
    ([], []),
])
def test_turns_are_runs_of_one_language(langs, turns):
    assert segment_turns(langs) == turns


def lines_of(convs):
    return [f"{name}\t{lang}\t{spk}" for name, rows in convs for lang, spk in rows]


def test_consecutive_speakers_of_one_language_merge_into_one_turn():
    convs = [("c", [("en", "Jesus"), ("en", "Peter"), ("es", "narrator"), ("es", "crowd"), ("en", "Jesus")])]
    index = ConversationIndex.from_lines(lines_of(convs), ("en", "es"))
    assert index.turn.tolist() == [0, 0, 1, 1, 2]
    assert index.turn_pos.tolist() == [0, 1, 0, 1, 0]
    assert index.n_turns.tolist() == [3]
    assert index.speakers[1] == "Peter"


def hand_index():
    convs = [("a", [("es", "n"), ("en", "J"), ("en", "J"), ("es", "n"), ("en", "J"), ("en", "J")]),
             ("b", [("en", "J"), ("es", "n"), ("es", "n")])]
    return ConversationIndex.from_lines(lines_of(convs), ("en", "es"))


def test_history_is_exactly_the_earlier_sentences_of_the_conversation():
    index = hand_index()
    for i in range(len(index)):
        h = index.history(i)
        c = index.conv_of[i]
        assert h == [j for j in index.sentences(c) if j < i]  # never itself, never a later one
    assert index.history(5) == [0, 1, 2, 3, 4]  # completed turns of both languages + the ongoing turn's start
    assert index.history(6) == []  # a new conversation starts empty


def test_history_restrictions_of_the_evaluation_switches():
    index = hand_index()
    assert index.history(5, "prev_sent") == [4]
    assert index.history(5, "current_turn") == [4]
    assert index.history(4, "current_turn") == []
    assert index.history(5, "same_lang_prev_turns") == [1, 2]
    assert index.history(5, "other_lang_prev_turns") == [0, 3]
    for ctx in ("prev_sent", "current_turn", "same_lang_prev_turns", "other_lang_prev_turns"):
        for i in range(len(index)):
            assert all(j < i and index.conv_of[j] == index.conv_of[i] for j in index.history(i, ctx))


# ------------------------------------------------------------------------------------------ bad input
def test_unknown_language_tag_names_file_and_line():
    lines = ["a\tes\tn", "a\ten\tJ", "a\tfr\tX"]
    with pytest.raises(ConversationDataError, match=r"x\.conv:3: unknown language tag 'fr'"):
        ConversationIndex.from_lines(lines, ("en", "es"), "x.conv")


def test_one_language_conversation_is_an_error_or_accepted_on_request():
    lines = ["a\tes\tn", "a\ten\tJ", "b\tes\tn", "b\tes\tn"]
    with pytest.raises(ConversationDataError, match=r"x\.conv:3: conversation 'b' has one language only"):
        ConversationIndex.from_lines(lines, ("en", "es"), "x.conv")
    index = ConversationIndex.from_lines(lines, ("en", "es"), "x.conv", allow_monolingual=True)
    assert index.n_turns.tolist() == [2, 1]


def test_empty_turn_and_broken_conversation_are_errors():
    index = ConversationIndex.from_lines(["a\tes\tn", "a\ten\tJ", "a\tes\tn"], ("en", "es"), "x.conv")
    with pytest.raises(ConversationDataError, match=r"x\.conv:2: empty source sentence"):
        index.check_sources([5, 1, 4])
    with pytest.raises(ConversationDataError, match=r"x\.conv:4: conversation 'a' started at line 1"):
        ConversationIndex.from_lines(["a\tes\tn", "a\ten\tJ", "b\ten\tJ", "a\tes\tn"], ("en", "es"), "x.conv")
    with pytest.raises(ConversationDataError, match=r"x\.conv:2: expected"):
        ConversationIndex.from_lines(["a\tes\tn", "a en J"], ("en", "es"), "x.conv")


# ------------------------------------------------------------------------------------------ batches
def toy_pair_dataset(index, vocab=40, seed=0):
    g = torch.Generator().manual_seed(seed)
    d = make_dictionary(vocab)
    src = [torch.cat([torch.randint(4, vocab, (3,), generator=g), torch.tensor([2])]) for _ in range(len(index))]
    tgt = [torch.cat([torch.randint(4, vocab, (4,), generator=g), torch.tensor([2])]) for _ in range(len(index))]
    return LanguagePairDataset(src, torch.tensor([4] * len(src)), d, tgt, torch.tensor([5] * len(tgt)), d,
                               shuffle=False)


def test_collater_gives_each_row_its_history_and_extra_rows_for_a_cut_conversation():
    index = hand_index()
    base = toy_pair_dataset(index)
    ds = ConversationPairDataset(base, index, target_history="reference")
    rows = [4, 5, 7]  # a chunk: the later part of conversation a, and b's second sentence
    s = ds.collater([ds[i] for i in rows])
    net = s["net_input"]
    ids = s["id"].tolist()
    assert s["hist_id"].tolist() == [0, 1, 2, 3, 6]  # the earlier sentences not in the batch
    nset = ids + s["hist_id"].tolist()
    for b, i in enumerate(ids):
        got = [nset[r] for r in net["hist_index"][b].tolist() if r >= 0]
        assert got == index.history(i)
    assert net["direction"].tolist() == [int(index.lang[i]) for i in ids]
    assert net["nset_turn"].tolist() == [int(index.turn[i]) for i in nset]
    assert net["hist_src_tokens"].shape[0] == 5
    for r, i in enumerate(nset):  # the target side of the history: here the reference (training)
        t = net["hist_tgt_tokens"][r]
        assert torch.equal(t[t.ne(1)], base[i]["target"])
    no_tgt = ConversationPairDataset(base, index, target_history=None).collater([ds[i] for i in rows])
    assert "hist_tgt_tokens" not in no_tgt["net_input"]


def test_conversation_batches_keep_conversations_whole_at_inference():
    index = hand_index()
    num_tokens = np.full(len(index), 10)
    batches = conversation_batches(index, num_tokens, max_tokens=30)
    assert [b.tolist() for b in batches] == [[0, 1, 2, 3, 4, 5], [6, 7, 8]]
    cut = conversation_batches(index, num_tokens, max_tokens=30, cut_long=True, order=[1, 0])
    assert [b.tolist() for b in cut] == [[6, 7, 8], [0, 1, 2], [3, 4, 5]]


def test_add_history_keys_with_a_restricted_context():
    index = hand_index()
    base = toy_pair_dataset(index)
    s = base.collater([base[i] for i in range(6)])
    s = add_history_keys(s, list(range(6)), index, lambda i: index.history(i, "prev_sent"), base)
    assert s["net_input"]["hist_index"].tolist() == [[-1], [0], [1], [2], [3], [4]]


# ------------------------------------------------------------------------------------------ the builder
OSIS = OrderedDict([
    (("Matthew", 4, 1), 'Then Jesus was led up by the Spirit.'),
    (("Matthew", 4, 2), 'Jesus said to him, <q marker="" who="Jesus">“Get behind me, Satan! For it is written, '
                        '‘You shall worship the Lord.’”</q><note placement="foot">some note words here</note>'),
    (("Matthew", 4, 3), 'He said, <q who="Jesus">“Follow</q> me,” and they followed him at once that day.'),
    (("Song of Solomon", 1, 2), '<speaker>Beloved</speaker> Let him kiss me with the kisses of his mouth;'),
    (("Song of Solomon", 1, 3), 'Your oils have a pleasing fragrance.'),
    (("Song of Solomon", 1, 4), '<speaker>Lover</speaker> If you don’t know, most beautiful among women,'),
])


def test_verse_speakers_from_quotes_and_speaker_labels():
    sp = tool.verse_speakers(OSIS)
    assert sp[("Matthew", 4, 1)][0] == ""
    who, share = sp[("Matthew", 4, 2)]
    assert who == "Jesus" and share > 0.5  # notes are not counted
    assert sp[("Matthew", 4, 3)][0] == ""  # the narrator says most of the words
    assert sp[("Song of Solomon", 1, 2)][0] == "Beloved"
    assert sp[("Song of Solomon", 1, 3)][0] == "Beloved"  # a label holds until the next one
    assert sp[("Song of Solomon", 1, 4)][0] == "Lover"


def test_build_conversations_alternates_languages_by_party_and_drops_one_party_chapters():
    pairs = [(b, c, v, f"es {b} {v}", f"en {b} {v}") for b, c, v in OSIS] + [("Ruth", 1, 1, "es", "en")]
    convs, dropped = tool.build_conversations(pairs, tool.verse_speakers(OSIS))
    assert [c["id"] for c in convs] == ["Matthew.4", "Song_of_Solomon.1"]
    assert [ln[0] for ln in convs[0]["lines"]] == ["es", "en", "es"]
    assert [ln[0] for ln in convs[1]["lines"]] == ["en", "en", "es"]
    assert dropped == {"one_party_chapters": 1}
    splits = tool.split_conversations(convs + [{"id": "Mark.1", "book": "Mark", "lines": []}], 1, seed=1)
    assert [c["id"] for c in splits["test"]] == ["Mark.1"]
    assert len(splits["valid"]) == 1 and len(splits["train"]) == 1  # dev carved from train


def test_fixture_statistics_and_the_cli_error_convention(tmp_path):
    stats = tool.folder_stats(str(FIXTURE))
    assert stats["train"]["conversations"] == 4 and stats["test"]["sentences"] == 12
    text = tool.table(stats)
    assert "| #Conversations | 4 / 1 / 2 |" in text
    (tmp_path / "train.conv").write_text("a\tes\tn\na\tes\tn\n")
    for sp in ("valid", "test"):
        (tmp_path / f"{sp}.conv").write_text("")
    p = subprocess.run([sys.executable, "-m", "fairseq_ext.tools.corpora.conversations", "stats", str(tmp_path)],
                       capture_output=True, text=True, cwd=ROOT)
    assert p.returncode == 2
    assert p.stderr.strip() == f"error: {tmp_path / 'train.conv'}:1: conversation 'a' has one language only " \
                               f"(2 sentences, all 1); a bilingual conversation needs both languages (at least " \
                               f"two turns)"


def test_score_reports_overall_and_per_direction_bleu(tmp_path):
    out = tmp_path / "gen.txt"
    conv = FIXTURE / "test.conv"
    refs = (FIXTURE / "test.tgt").read_text().splitlines()
    out.write_text("".join(f"T-{i}\t{r}\nH-{i}\t-1.0\t{r}\nD-{i}\t-1.0\t{r}\n" for i, r in enumerate(refs)))
    res = tool.score(str(out), str(conv))
    assert set(res) == {"overall", "en->es", "es->en"}
    assert res["overall"]["bleu"] == 100.0 and res["en->es"]["sentences"] + res["es->en"]["sentences"] == 12


def test_the_target_history_is_spelled_as_the_documents_target_context():
    """``gold`` (the documents' ``--doc-target-context`` value) is the one spelling; ``reference``, the earlier one,
    still loads and gives the same batches."""
    from fairseq_ext.data.conversations import TARGET_HISTORY
    from fairseq_ext.data.documents import TARGET_CONTEXT

    assert set(TARGET_CONTEXT) <= set(TARGET_HISTORY)
    index = hand_index()
    base = toy_pair_dataset(index)
    gold, old = (ConversationPairDataset(base, index, target_history=t) for t in ("gold", "reference"))
    a, b = gold.collater([gold[i] for i in range(len(gold))]), old.collater([old[i] for i in range(len(old))])
    assert torch.equal(a["net_input"]["hist_tgt_tokens"], b["net_input"]["hist_tgt_tokens"])
