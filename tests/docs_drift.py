"""Checks that what the documentation names exists in the code: the drift checker of examples/*/README.md and README.md.

``check_text(text, relpath, known)`` returns one ``FILE:LINE: problem`` string per problem in a Markdown text:

* the ``## Names`` table (``| kind | name | what |``): each backticked name of a row exists as its kind says
  (architecture, with at most one ``*`` glob that must match a registered name; model; criterion; task;
  generator; lr-scheduler; optimizer: fairseq's registries after ``import fairseq_ext``; option; console script;
  module: importable with ``python -m``; recipe, file: in the repository);
* every ``--option`` written in a code block or a backticked span is an option some code defines: a string literal
  ``"--x-y"`` or a field / argument ``x_y`` (``x_y: ... = field(...)``, ``args.x_y``, ``getattr(args, "x_y")``) in
  fairseq_ext/, recipes/, scripts/, examples/, tests/conftest.py, the installed fairseq and fairseq_cli, or the CLIs the
  documents call (pip, torchrun, pytest, sacrebleu);
* every repository path (``recipes/...``, ``fairseq_ext/...``, ``examples/...``, ``tests/...``, ``scripts/...``)
  in a code block or a backticked span, and every relative Markdown link, exists;
* every ``fairseq-ext-*`` console script is one of setup.py's, and every ``python -m fairseq_ext...`` module can run;
* in commands, the value of ``--arch``/``--task``/``--criterion``/``--optimizer``/``--lr-scheduler`` is registered as
  that kind; in backticked prose, every snake_case name (``selattn_{enc,dec}_sent[_bench]`` expanded) is registered,
  a module of the plugin, or defined in the code (``def``/``class``, an assignment, a quoted string, a recipe's
  choice, a job of the results).

For a results log (examples/*/results.md, recipes/bench/RESULTS.md: past runs, whose options and names may since have
been renamed) ``check_text(..., names=False)`` checks only the paths, links, console scripts and ``python -m`` modules.

The tests that use it are tests/test_examples.py (the committed documents, and the checker on a modified copy) and
tests/test_examples_own_data.py (the ``bash own-data`` block of each example, run on the tiny slice).
"""
import fnmatch
import functools
import importlib.util
import itertools
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SITE = next((ROOT / ".venv" / "lib").glob("python3*/site-packages"), None)

# The chapter folders of examples/ (one per thesis chapter), in thesis and chapter order.
CHAPTERS = [
    ("Ampomah", 3, "joint_attention"), ("Ampomah", 4, "multi_supervision"), ("Ampomah", 5, "dual_contextual"),
    ("Nguyen", 3, "transfer_related_languages"), ("Nguyen", 4, "concat_augmentation"), ("Nguyen", 5, "lexical_model"),
    ("Nguyen", 6, "transformers_without_tears"), ("Nguyen", 7, "untied_positions"),
    ("Maruf", 3, "document_memory"), ("Maruf", 4, "selective_attention"), ("Maruf", 5, "multi_speaker_conversations"),
    ("Gu", 2, "rnnsearch_decoding"), ("Gu", 3, "copynet"), ("Gu", 4, "search_engine_guided"),
    ("Gu", 5, "universal_nmt"), ("Gu", 6, "meta_nmt"), ("Gu", 7, "trainable_greedy"), ("Gu", 8, "nat_fertility"),
    ("Gu", 9, "simultaneous"),
]
SECTIONS = ["What it is", "Names", "Your own data", "Bible reproduction", "Thesis setting", "Results", "Limitations"]
KINDS = ("architecture", "model", "criterion", "task", "generator", "lr-scheduler", "optimizer", "option",
         "console script", "module", "recipe", "file")
PATH_PREFIXES = ("recipes", "fairseq_ext", "examples", "tests", "scripts")

FENCE = re.compile(r"^\s*(`{3,}|~{3,})\s*(.*)$")
INLINE = re.compile(r"(`+)(.+?)(?<!`)\1(?!`)", re.S)
OPTION = re.compile(r"(?<![\w-])--([A-Za-z][\w-]*)")
CONSOLE = re.compile(r"(?<![\w-])fairseq-ext-[a-z0-9]+(?:-[a-z0-9]+)*")
PYTHON_M = re.compile(r"python3?(?:\.\d+)?\s+-m\s+(fairseq_ext[\w.]*)")
PATH = re.compile(r"(?<![\w./$~-])((?:%s)/(?:[^\s`'\"()\[\]|;&,{}]|\{[^{}\s`]*\})*)" % "|".join(PATH_PREFIXES))
LINK = re.compile(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


# ---------------------------------------------------------------------------------------------- reading Markdown

def code_segments(text: str):
    """``(line, text, in_block, info)`` of every fenced code block line and every inline code span.

    Inline spans are found paragraph by paragraph (a span may run over a line break); ``line`` is the 1-based line
    where the segment starts, ``info`` the fence's info string (``bash own-data``) or None for inline spans.
    """
    out, para, fence = [], [], None

    def flush():
        if para:
            start, joined = para[0][0], "\n".join(t for _, t in para)
            for m in INLINE.finditer(joined):
                out.append((start + joined[:m.start(2)].count("\n"), m.group(2), False, None))
            para.clear()

    for i, line in enumerate(text.split("\n"), 1):
        m = FENCE.match(line)
        if fence is not None:
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) and not m.group(2).strip():
                fence = None
            else:
                out.append((i, line, True, info))
        elif m:
            flush()
            fence, info = m.group(1), m.group(2).strip()
        elif not line.strip():
            flush()
        else:
            para.append((i, line))
    flush()
    return out


def own_data_blocks(text: str):
    """The ``bash own-data`` blocks: ``[(first line number, block text)]``."""
    # an empty block line is not a segment of its own in code_segments: re-read the block from the text
    lines, out, start = text.split("\n"), [], None
    for i, line in enumerate(lines):
        m = FENCE.match(line)
        if start is None and m and m.group(2).split() == ["bash", "own-data"]:
            start = i + 1
        elif start is not None and m and not m.group(2).strip():
            out.append((start + 1, "\n".join(lines[start:i]) + "\n"))
            start = None
    return out


def tiny_env(block: str) -> dict:
    """The variables of the block's first line ``# tiny: VAR=value ...``."""
    first = block.lstrip("\n").split("\n", 1)[0]
    m = re.match(r"#\s*tiny:\s*(.*)$", first)
    if not m:
        raise ValueError(f"the first line of a bash own-data block must be '# tiny: VAR=value ...', not {first!r}")
    pairs = m.group(1).split()
    bad = [p for p in pairs if not re.fullmatch(r"[A-Za-z_]\w*=\S*", p)]
    if bad:
        raise ValueError(f"'# tiny:' takes VAR=value words only, not {bad}")
    return dict(p.split("=", 1) for p in pairs)


def headings(text: str, level: int = 2):
    """``[(line, title)]`` of the ``##`` headings outside code blocks."""
    code = {line for line, _, in_block, _ in code_segments(text) if in_block}
    marks = "#" * level
    return [(i, line[level + 1:].strip()) for i, line in enumerate(text.split("\n"), 1)
            if i not in code and line.startswith(marks + " ")]


def names_table(text: str):
    """``(header line, [(line, kind cell, name cell)])`` of the ``## Names`` table, or None when there is none."""
    lines = text.split("\n")
    secs = headings(text)
    for k, (line, title) in enumerate(secs):
        if title == "Names":
            end = secs[k + 1][0] if k + 1 < len(secs) else len(lines) + 1
            rows = [(i, lines[i - 1]) for i in range(line + 1, end) if lines[i - 1].lstrip().startswith("|")]
            if not rows:
                return line, None, []
            header, body = rows[0], [r for r in rows[1:] if not re.fullmatch(r"\s*\|[\s|:-]*\|\s*", r[1])]
            cells = []
            for i, row in body:
                parts = [c.strip() for c in row.strip().strip("|").split("|")]
                cells.append((i, parts[0], parts[1] if len(parts) > 1 else ""))
            return header[0], header[1], cells
    return None


# ------------------------------------------------------------------------------------------ what the code defines

@functools.lru_cache(maxsize=None)
def known_names():
    """Everything a document may name, read once per process: registries, options, console scripts."""
    from fairseq_ext.__main__ import registrations

    ours = registrations()  # imports fairseq_ext and registers every plugin module
    from fairseq.criterions import CRITERION_REGISTRY
    from fairseq.data import encoders
    from fairseq.models import ARCH_MODEL_REGISTRY, MODEL_REGISTRY
    from fairseq.optim import OPTIMIZER_REGISTRY
    from fairseq.optim.lr_scheduler import LR_SCHEDULER_REGISTRY
    from fairseq.tasks import TASK_REGISTRY
    from fairseq_ext.generators.decoding import DECODING_ALGORITHMS

    generators = set(ours["generators"]) | set(DECODING_ALGORITHMS) | {"doc_bcd"} | {
        p.stem for p in (ROOT / "fairseq_ext" / "generators").glob("*.py") if not p.stem.startswith("_")}
    registered = set().union(ARCH_MODEL_REGISTRY, MODEL_REGISTRY, CRITERION_REGISTRY, TASK_REGISTRY,
                             LR_SCHEDULER_REGISTRY, OPTIMIZER_REGISTRY, encoders.TOKENIZER_REGISTRY,
                             encoders.BPE_REGISTRY, generators)
    return {
        "identifier": registered | defined_identifiers(),
        "architecture": set(ARCH_MODEL_REGISTRY), "model": set(MODEL_REGISTRY), "criterion": set(CRITERION_REGISTRY),
        "task": set(TASK_REGISTRY), "lr-scheduler": set(LR_SCHEDULER_REGISTRY), "optimizer": set(OPTIMIZER_REGISTRY),
        "generator": generators, "option": defined_options(), "console script": console_scripts() | fairseq_scripts(),
        "ours console script": console_scripts(),
    }


def option_sources():
    """The Python files whose option literals and fields count as defined options."""
    files = [p for d in ("fairseq_ext", "recipes", "scripts", "examples") for p in (ROOT / d).rglob("*.py")]
    files.append(ROOT / "tests" / "conftest.py")
    if SITE is not None:
        for d in ("fairseq", "fairseq_cli", "sacrebleu", "_pytest"):
            files += (SITE / d).rglob("*.py")
        files += [SITE / "pip" / "_internal" / "cli" / "cmdoptions.py", SITE / "torch" / "distributed" / "run.py"]
    return [f for f in files if f.is_file()]


LITERAL = re.compile(r"""["'](--[A-Za-z][\w-]*)["']""")
FIELD = re.compile(r"^[ \t]+([a-z][a-z0-9_]*)[ \t]*:[^=\n]*=", re.M)
ATTRIBUTE = re.compile(r"\b(?:args|cfg)\.([a-z][a-z0-9_]*)\b|getattr\(\s*\w+\s*,\s*[\"']([a-z][a-z0-9_]*)[\"']")


def defined_options(files=None) -> set:
    """``--x-y`` for every option literal, dataclass field and ``args.x_y`` attribute in the option sources."""
    opts = set()
    for f in files if files is not None else option_sources():
        src = f.read_text(errors="replace")
        opts.update(LITERAL.findall(src))
        names = set(FIELD.findall(src)) | {a or b for a, b in ATTRIBUTE.findall(src)}
        opts.update("--" + n.replace("_", "-") for n in names)
        opts.update("--" + n for n in names)  # torchrun/spm style underscores
    return opts


IDENTIFIER = re.compile(r"[a-z][a-z0-9]*(?:_[a-z0-9]+)+")
DEFINED = re.compile(r"\b(?:def|class)\s+(\w+)|\b(\w+)\s*=|[\"'`](\w+)[\"'`]")
CASE_LABELS = re.compile(r"^\s*([\w|-]+)\)", re.M)  # a shell recipe's choices: `m2c_src|m2c_both)`
# names of other software that a document mentions (not this code's)
FOREIGN = {"en_core_web_sm"}
# an option whose value is a registered name of that kind (checked in commands)
VALUE_KIND = {"--arch": "architecture", "--task": "task", "--criterion": "criterion", "--optimizer": "optimizer",
              "--lr-scheduler": "lr-scheduler"}


def defined_identifiers() -> set:
    """snake_case names the code defines: modules, ``def``/``class`` names, assignments, quoted strings (choices,
    JSON keys), and the job and configuration names of the benchmark's results."""
    files = option_sources() + [p for d in ("recipes", "scripts", "examples") for p in (ROOT / d).rglob("*.sh")]
    files += [ROOT / "recipes" / "bench" / "RESULTS.md"] + list((ROOT / "examples").glob("*/results.md"))
    names = {p.stem for p in (ROOT / "fairseq_ext").rglob("*.py")} | {"fairseq_ext"}
    for f in files:
        text = f.read_text(errors="replace")
        for groups in DEFINED.findall(text):
            names.update(g for g in groups if g)
        if f.suffix == ".sh":
            names.update(n for labels in CASE_LABELS.findall(text) for n in labels.split("|"))
    return {n for n in names if IDENTIFIER.fullmatch(n)}


def expand(token: str):
    """``a_{x,y}[_b]`` -> a_x, a_y, a_x_b, a_y_b: a name or path written with its variants (shell braces)."""
    parts = re.split(r"(\{[^{}]*\}|\[[^\[\]]*\])", token)
    choices = [p[1:-1].split(",") if p[:1] == "{" and p[-1:] == "}" else
               ["", p[1:-1]] if p[:1] == "[" and p[-1:] == "]" else [p] for p in parts]
    return ["".join(c) for c in itertools.product(*choices)]


def console_scripts() -> set:
    return set(re.findall(r"[\"'](fairseq-ext-[\w-]+)\s*=", (ROOT / "setup.py").read_text()))


def fairseq_scripts() -> set:
    import importlib.metadata as md

    names = set()
    for dist in ("fairseq-fixed", "fairseq", "sacrebleu", "torch"):
        try:
            names |= {ep.name for ep in md.distribution(dist).entry_points if ep.group == "console_scripts"}
        except md.PackageNotFoundError:
            pass
    return names


def module_problem(name: str):
    """None if ``python -m name`` can run, else why not."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError) as exc:
        return f"cannot be imported ({type(exc).__name__}: {exc})"
    if spec is None:
        return "does not exist"
    if spec.submodule_search_locations is not None and importlib.util.find_spec(name + ".__main__") is None:
        return "is a package without __main__.py (python -m cannot run it)"
    return None


# ----------------------------------------------------------------------------------------------------- checking

def path_exists(path: str, base: Path) -> bool:
    if any(ch in path for ch in "*?["):
        return any(base.glob(path))
    return (base / path).exists()


def clean_path(token: str):
    """The repository path a token names, or None when it is a pattern (``<topic>``, ``$WORK``, ``...``)."""
    token = token.split("::")[0].rstrip(".:,;)'\"")
    token = re.sub(r":\d+(?:-\d+)?$", "", token).rstrip(".:,;)'\"")
    if not token or any(s in token for s in ("<", ">", "$", "…", "...")):
        return None
    return token


def check_text(text: str, relpath: str, known=None, root: Path = ROOT, names: bool = True):
    """Every problem of one Markdown document, as ``relpath:LINE: what``.

    With ``names=False`` (a results log: it describes past runs whose options and names may since have been renamed)
    only the references to files and programs are checked: repository paths, relative links, ``fairseq-ext-*``
    console scripts and ``python -m`` modules.
    """
    known = known or known_names()
    problems = []
    table = names_table(text) if names else None
    # a name of the Names table is checked as its kind says (below), not again as a path or option
    named = {(line, name) for line, _, cell in (table[2] if table else []) for name in re.findall(r"`([^`]+)`", cell)}

    def add(line, msg, token=None):
        if (line, token) not in named:
            problems.append(f"{relpath}:{line}: {msg}")

    base = (root / relpath).parent
    for line, seg, in_block, _ in code_segments(text):
        def at(m):
            return line + seg[:m.start()].count("\n")

        for m in OPTION.finditer(seg) if names else ():
            opt = "--" + m.group(1).rstrip("-")
            if opt not in known["option"]:
                add(at(m), f"option {opt} is defined nowhere (fairseq_ext/, recipes/, scripts/, fairseq)", opt)
        for m in CONSOLE.finditer(seg):
            if m.group(0) not in known["ours console script"]:
                add(at(m), f"console script {m.group(0)} is not in setup.py", m.group(0))
        for m in PYTHON_M.finditer(seg):
            mod = m.group(1)
            if not mod.endswith("."):
                why = module_problem(mod)
                if why:
                    add(at(m), f"python -m {mod}: {why}")
        for m in PATH.finditer(seg):
            path = clean_path(m.group(1))
            if path is None:
                continue
            missing = [p for p in expand(path) if not path_exists(p, root)]
            if missing:
                add(at(m), f"path {', '.join(missing)} does not exist in the repository", m.group(1))
        if not names:
            continue
        if in_block:  # in a command, the values of --arch, --task, ... are registered names of that kind
            for m in re.finditer(r"(--arch|--task|--criterion|--optimizer|--lr-scheduler)[ =]([\w-]+)", seg):
                kind = VALUE_KIND[m.group(1)]
                if m.group(2) not in known[kind]:
                    add(at(m), f"{m.group(1)} {m.group(2)}: not a registered {kind}", m.group(2))
            continue
        for m in re.finditer(r"\S+", seg):  # in prose, every snake_case name is registered or defined
            word = m.group(0).strip(",.;:()'\"")
            if any(c in word for c in "<>$/*=") or word.startswith("-"):
                continue
            for name in expand(word):
                if IDENTIFIER.fullmatch(name) and name not in known["identifier"] | FOREIGN:
                    add(at(m), f"name {name} is neither registered nor defined in the code", word)
    code_lines = {line for line, _, in_block, _ in code_segments(text) if in_block}
    for i, text_line in enumerate(text.split("\n"), 1):
        if i in code_lines:
            continue
        for m in LINK.finditer(text_line):
            target = m.group(1).split("#")[0]
            if not target or re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("/"):
                continue
            if not (base / target).exists():
                add(i, f"link target {target} does not exist (relative to {base.relative_to(root) or '.'})")
    if table is not None:
        problems += check_names(table, relpath, known, base, root)
    return problems


def check_names(table, relpath, known, base, root):
    problems = []
    header_line, header, rows = table
    if header is None or [c.strip() for c in header.strip().strip("|").split("|")] != ["kind", "name", "what"]:
        problems.append(f"{relpath}:{header_line}: the ## Names table's header must be '| kind | name | what |'")
    for line, kind, cell in rows:
        where = f"{relpath}:{line}"
        if kind not in KINDS:
            problems.append(f"{where}: kind {kind!r} is not one of {', '.join(KINDS)}")
            continue
        if not re.fullmatch(r"`[^`]+`(?:, `[^`]+`)*", cell):
            problems.append(f"{where}: the name cell must be backticked names separated by ', ', not {cell!r}")
        for name in re.findall(r"`([^`]+)`", cell):
            why = name_problem(kind, name, known, base, root)
            if why:
                problems.append(f"{where}: {kind} `{name}` {why}")
    return problems


def name_problem(kind, name, known, base, root):
    """None if ``name`` exists as a ``kind``, else why not."""
    if any(b in name for b in "{}"):
        return "has braces: write each name out"
    if "*" in name and (kind != "architecture" or name.count("*") > 1):
        return "has a glob: only an architecture may use one '*'"
    if kind == "architecture" and "*" in name:
        return None if fnmatch.filter(known["architecture"], name) else "matches no registered architecture"
    if kind in ("architecture", "model", "criterion", "task", "generator", "lr-scheduler", "optimizer"):
        return None if name in known[kind] else f"is not registered (fairseq's {kind} registry)"
    if kind == "option":
        if not re.fullmatch(r"--[A-Za-z][\w-]*", name):
            return "must be written --option-name alone (its values go in the what cell)"
        return None if name in known["option"] else "is defined nowhere (fairseq_ext/, recipes/, scripts/, fairseq)"
    if kind == "console script":
        return None if name in known["console script"] else "is not a console script of setup.py or fairseq"
    if kind == "module":
        why = module_problem(re.sub(r"^python3? -m ", "", name))
        return None if why is None else why
    # recipe, file: relative to the repository root or to the document's folder
    return None if (root / name).exists() or (base / name).exists() else "does not exist"
