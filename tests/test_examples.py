"""The documentation names only what exists: examples/*/README.md and README.md against the code (no training).

Every name in an example's ``## Names`` table is registered (or is a console script, a runnable module, a file),
every ``--option``, repository path, relative link, ``fairseq-ext-*`` console script, ``python -m fairseq_ext...``
module and snake_case name written in a code block or backticks exists (tests/docs_drift.py), every thesis chapter has its folder and README
links it, and each example has the sections of the convention and one runnable ``bash own-data`` block (run on
the tiny slice by tests/test_examples_own_data.py). The results logs (examples/*/results.md and
recipes/bench/RESULTS.md) describe past runs, whose options and names may since have been renamed: only their
repository paths, relative links, console scripts and ``python -m`` modules are checked. A failure lists every
problem as FILE:LINE.
"""
import re

import pytest

from docs_drift import (CHAPTERS, ROOT, SECTIONS, check_text, code_segments, headings, known_names,
                        names_table, own_data_blocks, tiny_env)

DOCUMENTS = ["README.md"] + sorted(str(p.relative_to(ROOT)) for p in (ROOT / "examples").glob("*/README.md"))
EXAMPLES = [d for d in DOCUMENTS if d != "README.md"]
RESULTS = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "examples").glob("*/results.md")) + [
    "recipes/bench/RESULTS.md"]
# (results log, path) -> why a path that no longer exists anywhere may still be named there, as history.
# A file that moved is not listed here: the log names its current path.
HISTORICAL = {}


@pytest.fixture(scope="module")
def known():
    """Registries, defined options and console scripts, read once."""
    return known_names()


def report(problems):
    return f"{len(problems)} problem(s):\n" + "\n".join(problems)


def test_every_chapter_has_its_example_and_readme_links_it():
    readme = (ROOT / "README.md").read_text()
    problems = []
    for author, chapter, topic in CHAPTERS:
        folder = ROOT / "examples" / topic
        if not (folder / "README.md").is_file():
            problems.append(f"examples/{topic}/README.md: missing ({author} ch. {chapter})")
        if not re.search(r"\]\(examples/%s(?:/|/README\.md)?\)" % re.escape(topic), readme):
            problems.append(f"README.md: no link to examples/{topic}/ ({author} ch. {chapter})")
    extra = sorted({p.parent.name for p in (ROOT / "examples").glob("*/README.md")} - {t for _, _, t in CHAPTERS})
    problems += [f"examples/{name}/: not a chapter folder of the convention" for name in extra]
    assert not problems, report(problems)


@pytest.mark.parametrize("doc", DOCUMENTS)
def test_document_names_only_what_exists(doc, known):
    problems = check_text((ROOT / doc).read_text(), doc, known)
    assert not problems, report(problems)


@pytest.mark.parametrize("doc", RESULTS)
def test_results_log_names_only_files_that_exist(doc, known):
    problems = [p for p in check_text((ROOT / doc).read_text(), doc, known, names=False)
                if not any(d == doc and f" {path} " in p for d, path in HISTORICAL)]
    assert not problems, report(problems)


@pytest.mark.parametrize("doc", EXAMPLES or [pytest.param(None, marks=pytest.mark.skip(reason="no examples yet"))])
def test_example_has_the_convention_sections(doc):
    text = (ROOT / doc).read_text()
    problems = []
    lines = text.split("\n")
    if not re.match(r"# .+\(.+ch\. \d+\)", lines[0]):
        problems.append(f"{doc}:1: the title must be '# <Title> (<Author> <year>, ch. N)'")
    found = [(line, title) for line, title in headings(text) if title in SECTIONS]
    titles = [t for _, t in found]
    if titles != SECTIONS:
        problems.append(f"{doc}: its ## sections are {titles}, the convention's are {SECTIONS} (in this order)")
    if names_table(text) is None:
        problems.append(f"{doc}: no ## Names table")
    blocks = own_data_blocks(text)
    if len(blocks) != 1:
        problems.append(f"{doc}: {len(blocks)} ```bash own-data blocks (one is wanted)")
    for line, block in blocks:
        try:
            tiny_env(block)
        except ValueError as exc:
            problems.append(f"{doc}:{line}: {exc}")
    if not re.search(r"^\| system \| ours \(budget, CPU\) \| thesis \| verdict \|", text, re.M):
        problems.append(f"{doc}: the ## Results table must have the header "
                        "'| system | ours (budget, CPU) | thesis | verdict |'")
    assert not problems, report(problems)


# ------------------------------------------------------------------------------------- the checker catches drift

NAMES_TABLE = """
## Names

| kind | name | what |
|---|---|---|
| architecture | `transformer_jas_*_bench`, `transformer` | the variants |
| task | `translation_ext` | the task |
| criterion | `label_smoothed_cross_entropy` | the loss |
| lr-scheduler | `inverse_sqrt` | the schedule |
| optimizer | `adam` | the optimizer |
| generator | `doc_bcd` | decoding |
| option | `--max-update` | updates |
| console script | `fairseq-ext-data`, `fairseq-train` | tools |
| module | `fairseq_ext` | lists the names |
| recipe | `recipes/quickstart.sh` | the recipe |
| file | `tests/harness.py` | the helpers |
| architecture | `transformer_nosuch_*_bench` | drift |
| model | `no_such_model` | drift |
| option | `--no-such-option-anywhere` | drift |
| file | `recipes/no_such_recipe.sh` | drift |
| module | `fairseq_ext.no_such_module` | drift |
| widget | `x` | drift |
| task | `{translation_ext,concat_translation}` | drift |
"""
DRIFT_BLOCK = """
```bash
.venv/bin/fairseq-ext-no-such-tool --raw x
.venv/bin/python -m fairseq_ext.tools.no_such_tool
bash recipes/no_such_folder/ch1.sh
fairseq-train DATA --task translation_ext --arch transformer_no_such_arch --criterion cross_entropy
```

See [the recipe](recipes/no_such_link.md) and `tests/data/bible_tiny`, `recipes/<author>/chN.sh`, `$WORK/gen.out`,
`transformer_jas_m11_bench`, `copynet_{bench,syn}`, `doc_translation_no_such_name`.
"""


def line_of(text, needle):
    return text.split(needle)[0].count("\n") + 1


def test_checker_fails_on_a_renamed_option_and_a_missing_name_or_path(known):
    doc = "README.md"
    original = (ROOT / doc).read_text()
    before = set(check_text(original, doc, known))
    # rename the first option written in a code block, everywhere in the text
    line, option = next((line, m.group(0)) for line, seg, in_block, _ in code_segments(original) if in_block
                        for m in re.finditer(r"(?<![\w-])--[a-z][a-z0-9-]+", seg) if m.group(0) in known["option"])
    renamed = option + "-renamed"
    modified = re.sub(r"(?<![\w-])%s(?![\w-])" % re.escape(option), renamed, original)
    modified += NAMES_TABLE + DRIFT_BLOCK
    new = [p for p in check_text(modified, doc, known) if p not in before]

    expected = [
        f"{doc}:{line}: option {renamed} is defined nowhere",
        f"{doc}:{line_of(modified, '| architecture | `transformer_nosuch')}: architecture `transformer_nosuch_*_bench` "
        "matches no registered architecture",
        f"{doc}:{line_of(modified, '| model | `no_such_model')}: model `no_such_model` is not registered",
        f"{doc}:{line_of(modified, '| option | `--no-such')}: option `--no-such-option-anywhere` is defined nowhere",
        f"{doc}:{line_of(modified, '| file | `recipes/no_such')}: file `recipes/no_such_recipe.sh` does not exist",
        f"{doc}:{line_of(modified, '| module | `fairseq_ext.no_such')}: module `fairseq_ext.no_such_module` does not "
        "exist",
        f"{doc}:{line_of(modified, '| widget')}: kind 'widget' is not one of",
        f"{doc}:{line_of(modified, '| task | `{')}: task `{{translation_ext,concat_translation}}` has braces",
        f"{doc}:{line_of(modified, '.venv/bin/fairseq-ext-no-such')}: console script fairseq-ext-no-such-tool is not "
        "in setup.py",
        f"{doc}:{line_of(modified, 'python -m fairseq_ext.tools.no_such')}: python -m fairseq_ext.tools.no_such_tool: ",
        f"{doc}:{line_of(modified, 'bash recipes/no_such_folder')}: path recipes/no_such_folder/ch1.sh does not exist",
        f"{doc}:{line_of(modified, 'See [the recipe]')}: link target recipes/no_such_link.md does not exist",
        f"{doc}:{line_of(modified, '--arch transformer_no_such')}: --arch transformer_no_such_arch: not a registered "
        "architecture",
        f"{doc}:{line_of(modified, '`doc_translation_no_such')}: name doc_translation_no_such_name is neither "
        "registered nor defined",
    ]
    missing = [e for e in expected if not any(p.startswith(e) for p in new)]
    assert not missing, "the checker did not report:\n" + "\n".join(missing) + "\n\nit reported:\n" + "\n".join(new)
    # nothing else is reported but the drift above
    unexpected = [p for p in new if not any(p.startswith(e) for e in expected) and f"option {renamed} " not in p]
    assert not unexpected, "reported although it exists:\n" + "\n".join(unexpected)


def test_checker_reads_spans_over_line_breaks_and_skips_patterns(known):
    text = ("A span `fairseq-ext-data prepare\n--no-such-wrapped-option` runs over a line break.\n\n"
            "Patterns are not paths: `examples/<topic>/`, `$WORK/x.png`, `recipes/gu/ch{2,3}.sh`, "
            "`tests/test_examples.py::test_x`, `recipes/gu/ch2.sh:12`.\n")
    assert check_text(text, "README.md", known) == [
        "README.md:2: option --no-such-wrapped-option is defined nowhere "
        "(fairseq_ext/, recipes/, scripts/, fairseq)"]
    assert check_text("`recipes/gu/ch{2,99}.sh`\n", "README.md", known) == [
        "README.md:1: path recipes/gu/ch99.sh does not exist in the repository"]


def test_checker_reports_a_stale_path_of_a_results_log_and_leaves_its_options(known):
    text = ("## Job x\n\n  x (10:52): `fairseq-train --no-such-old-option` with `old_renamed_name`.\n"
            "Curves `recipes/bench/moved_away_curves.png`, see [the plot](no_such_plot.png),\n"
            "`.venv/bin/fairseq-ext-no-such-tool`, `python -m fairseq_ext.no_such_module`, `tests/harness.py`.\n")
    problems = check_text(text, "examples/copynet/results.md", known, names=False)
    expected = ["examples/copynet/results.md:4: path recipes/bench/moved_away_curves.png does not exist",
                "examples/copynet/results.md:4: link target no_such_plot.png does not exist (relative to "
                "examples/copynet)",
                "examples/copynet/results.md:5: console script fairseq-ext-no-such-tool is not in setup.py",
                "examples/copynet/results.md:5: python -m fairseq_ext.no_such_module: does not exist"]
    missing = [e for e in expected if not any(p.startswith(e) for p in problems)]
    assert not missing and len(problems) == len(expected), "expected:\n" + "\n".join(missing) + "\n\ngot:\n" + \
        "\n".join(problems)


def test_own_data_block_and_its_tiny_line_are_read():
    text = ("x\n\n```bash own-data\n# tiny: RAW=tests/data/bible_tiny UPDATES=4\n"
            "RAW=${RAW:-data/mine/raw}\n\necho $RAW\n```\n")
    [(line, block)] = own_data_blocks(text)
    assert line == 4 and block.endswith("echo $RAW\n")
    assert tiny_env(block) == {"RAW": "tests/data/bible_tiny", "UPDATES": "4"}
    with pytest.raises(ValueError, match="first line"):
        tiny_env("echo no tiny line\n")
