"""Bi-MSMT's release (Maruf 2019 ch. 5, bilingual multi-speaker conversations) as the files of the
``conversation_translation`` task.

    python examples/multi_speaker_conversations/report.py from-bimsmt --english concatenated_English_dev.txt \\
        --foreign concatenated_German_dev.txt --lang de --out DIR/valid

converts one split of the release (github.com/sameenmaruf/Bi-MSMT: ``<chp>`` (Europarl) or ``<d>`` (Subtitles)
starts a conversation, ``<sp>`` a speaker; on the English side every sentence carries ``<en>`` (English source,
translated into the Foreign language) or ``<2en>`` (Foreign source, translated into English); the Foreign file has
the same marker lines and untagged sentences) into ``OUT.src`` (the source sentence), ``OUT.tgt`` (its
translation) and ``OUT.conv`` (``CONV<TAB>LANG<TAB>SPEAKER<TAB>ID``, LANG = ``en`` or ``--lang``).
"""
from __future__ import annotations

import os
import re


class Error(Exception):
    pass


# ------------------------------------------------------------------------------------------ from-bimsmt
def convert_bimsmt(english: str, foreign: str, lang: str, out: str, prefix: str = "") -> dict:
    """One split of the Bi-MSMT release -> OUT.{src,tgt,conv}; returns counts."""
    with open(english, encoding="utf-8") as f:
        en = f.read().split("\n")
    with open(foreign, encoding="utf-8") as f:
        fo = f.read().split("\n")
    while en and not en[-1].strip():
        en.pop()
    while fo and not fo[-1].strip():
        fo.pop()
    if len(en) != len(fo):
        raise Error(f"{english} has {len(en)} lines, {foreign} {len(fo)}: the two sides must be line-aligned")
    prefix = prefix or os.path.basename(out)
    src, tgt, conv = [], [], []
    n_conv, speaker, stats = 0, 0, {"conversations": 0, "sentences": 0, "en_source": 0}
    for k, (e, f) in enumerate(zip(en, fo), start=1):
        e, f = e.strip(), f.strip()
        if e in ("<chp>", "<d>"):
            if f != e:
                raise Error(f"{foreign}:{k}: expected {e!r} (as {english}:{k}), got {f!r}")
            n_conv += 1
            speaker = 0
            continue
        if e == "<sp>":
            if f != e:
                raise Error(f"{foreign}:{k}: expected '<sp>' (as {english}:{k}), got {f!r}")
            speaker += 1
            continue
        if n_conv == 0:
            raise Error(f"{english}:{k}: a sentence before the first <chp>/<d>")
        m = re.match(r"^<(en|2en)>\s*(.*)$", e)
        if not m:
            raise Error(f"{english}:{k}: expected '<en> ...' or '<2en> ...', got {e[:40]!r}")
        if not m.group(2) or not f:
            raise Error(f"{english}:{k}: empty sentence (an empty turn cannot be translated)")
        name = f"{prefix}.{n_conv}"
        if m.group(1) == "en":
            src.append(m.group(2)), tgt.append(f)
            tag = "en"
            stats["en_source"] += 1
        else:
            src.append(f), tgt.append(m.group(2))
            tag = lang
        conv.append(f"{name}\t{tag}\tsp{max(speaker, 1)}\t{name}.{len(conv) + 1}")
    stats["conversations"], stats["sentences"] = n_conv, len(src)
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    for ext, lines in (("src", src), ("tgt", tgt), ("conv", conv)):
        with open(f"{out}.{ext}", "w", encoding="utf-8") as w:
            w.write("".join(x + "\n" for x in lines))
    return stats
