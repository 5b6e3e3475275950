"""Docs that cannot drift: every option, registered name, console script and repository path that README.md (and
``examples/*/README.md``) names in backticks exists. A renamed option or architecture fails here.

* ``--an-option``: defined somewhere the commands read options from -- a dataclass field ``an_option`` or an
  ``add_argument("--an-option")`` in the plugin, its recipes and tools, or fairseq;
* ``fairseq-ext-x``: a console script of setup.py;
* a path under ``fairseq_ext/``, ``recipes/``, ``tests/``, ``scripts/`` or ``examples/``: it exists;
* a snake_case name (``selattn_{enc,dec}_{sent,word}[_bench]`` expanded): registered with fairseq (task, model,
  architecture, criterion, LR scheduler, optimizer, tokenizer), a module of the plugin, or an identifier defined
  in its code.
"""
import functools
import itertools
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md"] + sorted((ROOT / "examples").glob("*/README.md"))
CHECKED_DIRS = ("fairseq_ext/", "recipes/", "tests/", "scripts/", "examples/")


def backticked(text: str):
    """The backticked spans of ``text`` and the words of its code blocks (commands count too)."""
    blocks = re.findall(r"```.*?```", text, flags=re.S)
    for block in blocks:
        text = text.replace(block, " ")
    return re.findall(r"`([^`\n]+)`", text) + [w for b in blocks for w in b.strip("`").split()]


def expand(token: str):
    """``a_{x,y}[_b]`` -> a_x, a_y, a_x_b, a_y_b."""
    parts = re.split(r"(\{[^{}]*\}|\[[^\[\]]*\])", token)
    options = []
    for p in parts:
        if p.startswith("{") and p.endswith("}"):
            options.append(p[1:-1].split(","))
        elif p.startswith("[") and p.endswith("]"):
            options.append(["", p[1:-1]])
        else:
            options.append([p])
    return ["".join(c) for c in itertools.product(*options)]


@functools.lru_cache(maxsize=None)
def source_text() -> str:
    import fairseq
    import fairseq_cli

    files = list((ROOT / "fairseq_ext").rglob("*.py")) + list((ROOT / "recipes").rglob("*.py")) + \
        list((ROOT / "recipes").rglob("*.sh")) + list((ROOT / "scripts").glob("*.sh")) + \
        [ROOT / "tests" / "conftest.py", ROOT / "recipes" / "bench" / "RESULTS.md"] + \
        list(Path(fairseq.__file__).parent.rglob("*.py")) + list(Path(fairseq_cli.__file__).parent.rglob("*.py"))
    return "\n".join(p.read_text(errors="replace") for p in files)


@functools.lru_cache(maxsize=None)
def registered() -> set:
    import fairseq_ext
    from fairseq.criterions import CRITERION_REGISTRY
    from fairseq.data import encoders as enc
    from fairseq.models import ARCH_MODEL_REGISTRY, MODEL_REGISTRY
    from fairseq.optim import OPTIMIZER_REGISTRY
    from fairseq.optim.lr_scheduler import LR_SCHEDULER_REGISTRY
    from fairseq.tasks import TASK_REGISTRY

    fairseq_ext.register()
    names = set()
    for reg in (TASK_REGISTRY, MODEL_REGISTRY, ARCH_MODEL_REGISTRY, CRITERION_REGISTRY, OPTIMIZER_REGISTRY,
                LR_SCHEDULER_REGISTRY, enc.TOKENIZER_REGISTRY, enc.BPE_REGISTRY):
        names |= set(reg)
    names |= {p.stem for p in (ROOT / "fairseq_ext").rglob("*.py")} | {"fairseq_ext"}
    return names


# words a doc shows as examples of a user's own values, or of other tools (pip), not of this code
EXAMPLES = {"report_12", "en_core_web_sm", "--no-build-isolation"}


def console_scripts() -> set:
    return set(re.findall(r'"(fairseq-ext-[a-z-]+)=', (ROOT / "setup.py").read_text()))


def option_exists(opt: str) -> bool:
    name = opt[2:]
    text = source_text()
    return (re.search(rf"\b{re.escape(name.replace('-', '_'))}\s*:", text) is not None
            or f'"{opt}"' in text or f"'{opt}'" in text)


def identifier_exists(name: str) -> bool:
    """Registered, a module, defined (``def``/``class``/assignment), a quoted string (a choice, a JSON key) or a job
    name of the results in the code."""
    n = re.escape(name)
    return name in registered() or re.search(rf"\b(def|class)\s+{n}\b|\b{n}\s*=|[\"'`]{n}[\"'`]",
                                             source_text()) is not None


def problems_in(doc: Path):
    text = doc.read_text()
    bad = []
    for token in backticked(text):
        for word in token.split():
            word = word.strip(",.;:()'\"")
            for w in expand(word):
                w = w.split("=", 1)[0]
                if w in EXAMPLES:
                    continue
                if re.fullmatch(r"--[a-z][a-z0-9-]+", w):
                    if not option_exists(w):
                        bad.append(f"option {w}")
                elif re.fullmatch(r"fairseq-ext-[a-z-]+", w):
                    if w not in console_scripts():
                        bad.append(f"console script {w}")
                elif w.startswith(CHECKED_DIRS) and re.fullmatch(r"[\w./-]+", w) and "*" not in w:
                    if not (ROOT / w.split(":")[0]).exists():
                        bad.append(f"path {w}")
                elif re.fullmatch(r"[a-z][a-z0-9]*(_[a-z0-9]+)+", w) and w == word.split("=", 1)[0]:
                    if not identifier_exists(w):
                        bad.append(f"name {w}")
    return sorted(set(bad))


@pytest.mark.parametrize("doc", DOCS, ids=[str(d.relative_to(ROOT)) for d in DOCS])
def test_every_name_a_doc_mentions_exists(doc):
    assert problems_in(doc) == []


def test_the_check_fails_on_a_renamed_option_name_and_path(tmp_path):
    doc = tmp_path / "README.md"
    doc.write_text("`--doc-id-pattern` `--doc-id-patern` `selattn_{enc,dec}_sent[_bench]` `selattn_enc_sentx` "
                   "`fairseq-ext-score` `fairseq-ext-scores` `recipes/maruf/ch4.sh` `recipes/maruf/ch9.sh`\n"
                   "```\nfairseq-train --task doc_translation --doc-max-contexts 3\n```\n")
    assert problems_in(doc) == ["console script fairseq-ext-scores", "name selattn_enc_sentx",
                                "option --doc-id-patern", "option --doc-max-contexts", "path recipes/maruf/ch9.sh"]
