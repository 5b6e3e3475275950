"""Each example's own-data commands run, from raw text to a score, on the committed tiny slice.

The ``bash own-data`` block of examples/<topic>/README.md runs as a user would run it: from the repository root,
``bash -euo pipefail``, with the variables of its first line ``# tiny: VAR=value ...`` (tiny sizes, the tiny
data), ``WORK`` a fresh folder, one thread, ``.venv/bin`` first on PATH. It must exit 0 and print a score line.
One test per chapter folder (marked slow: about 2 minutes each); the runner itself is checked on a block written
here, in a temporary folder.
"""
import os
import re
import subprocess

import pytest

from docs_drift import CHAPTERS, ROOT, check_text, own_data_blocks, tiny_env
from harness import env

FOLDERS = sorted({topic for _, _, topic in CHAPTERS} | {p.parent.name for p in (ROOT / "examples").glob("*/README.md")})
# a score line: sacreBLEU's "BLEU = 12.34 ...", "chrF2 = ...", accuracy, METEOR, latency (AL, AP, ...)
SCORE = re.compile(r"^.*\b(BLEU|chrF2?|METEOR|accuracy|AL|AP|CW|DAL|LAAL)\b.*\d", re.I | re.M)


def run_own_data(text: str, work, timeout: int = 900) -> subprocess.CompletedProcess:
    """Run the one ``bash own-data`` block of a README text with its tiny variables, ``WORK=work``."""
    blocks = own_data_blocks(text)
    assert len(blocks) == 1, f"{len(blocks)} ```bash own-data blocks (one is wanted)"
    _, block = blocks[0]
    script = work / "own_data.sh"
    script.write_text(block)
    variables = dict(tiny_env(block), WORK=str(work), OMP_NUM_THREADS="1",
                     PATH=f"{ROOT / '.venv' / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}")
    return subprocess.run(["bash", "-euo", "pipefail", str(script)], cwd=ROOT, env=env(**variables),
                          capture_output=True, text=True, timeout=timeout)


def assert_scored(p: subprocess.CompletedProcess, what: str):
    tail = f"--- stdout ---\n{p.stdout[-3000:]}\n--- stderr ---\n{p.stderr[-4000:]}"
    assert p.returncode == 0, f"{what}: the own-data block exited {p.returncode}\n{tail}"
    lines = [line for line in p.stdout.splitlines() if line.strip()]
    assert lines and SCORE.search("\n".join(lines[-8:])), f"{what}: no score line at the end of its output\n{tail}"


@pytest.mark.slow
@pytest.mark.parametrize("topic", FOLDERS)
def test_own_data_block_runs_on_the_tiny_slice(topic, tmp_path):
    readme = ROOT / "examples" / topic / "README.md"
    assert readme.is_file(), f"examples/{topic}/README.md is missing"
    assert_scored(run_own_data(readme.read_text(), tmp_path), f"examples/{topic}/README.md")


# ---------------------------------------------------------------------------------------------- the runner itself

FIXTURE = """# A plain Transformer (fixture)

## Your own data

```bash own-data
# tiny: RAW=tests/data/bible_tiny SRC=es TGT=en VOCAB=200 UPDATES=4
RAW=${RAW:-data/mine/raw}; SRC=${SRC:-de}; TGT=${TGT:-en}; WORK=${WORK:-work/mine}; VOCAB=${VOCAB:-8000}
UPDATES=${UPDATES:-3000}
.venv/bin/fairseq-ext-data prepare --raw $RAW --src $SRC --tgt $TGT --out $WORK/data --vocab-size $VOCAB
.venv/bin/fairseq-train $WORK/data/spm$VOCAB/bin --user-dir fairseq_ext --task translation_ext --cpu \\
    --arch transformer_cpu_small --optimizer adam --lr 1e-3 --lr-scheduler inverse_sqrt --warmup-updates 4 \\
    --criterion label_smoothed_cross_entropy --label-smoothing 0.1 --max-tokens 2048 \\
    --max-update $UPDATES --save-dir $WORK/ckpt --no-epoch-checkpoints
.venv/bin/fairseq-generate $WORK/data/spm$VOCAB/bin --user-dir fairseq_ext --task translation_ext --cpu \\
    --path $WORK/ckpt/checkpoint_best.pt --beam 5 --batch-size 64 --post-process sentencepiece > $WORK/gen.out
.venv/bin/fairseq-ext-score score --hyp $WORK/gen.out --ref $RAW/test.$TGT
```
"""


def test_runner_passes_the_tiny_variables_and_work(tmp_path):
    text = ("```bash own-data\n# tiny: RAW=tests/data/bible_tiny UPDATES=4\n"
            "RAW=${RAW:-data/mine/raw}; UPDATES=${UPDATES:-20000}\n"
            "test -f $RAW/train.es; test \"$(pwd)\" = \"%s\"\n"
            "echo \"$UPDATES $OMP_NUM_THREADS $(command -v fairseq-train)\" > $WORK/seen\n"
            "echo 'BLEU = 1.00 10.0/1.0/0.5/0.1 (BP = 1.000)'\n```\n" % ROOT)
    p = run_own_data(text, tmp_path)
    assert_scored(p, "fixture")
    assert (tmp_path / "seen").read_text().split() == ["4", "1", str(ROOT / ".venv" / "bin" / "fairseq-train")]


def test_runner_fails_on_a_failing_command_or_no_score(tmp_path):
    failing = "```bash own-data\n# tiny: X=1\nfalse | cat\necho 'BLEU = 1.0'\n```\n"
    with pytest.raises(AssertionError, match="exited 1"):  # pipefail: a failure inside a pipe stops the block
        assert_scored(run_own_data(failing, tmp_path), "fixture")
    unscored = "```bash own-data\n# tiny: X=1\necho done\n```\n"
    with pytest.raises(AssertionError, match="no score line"):
        assert_scored(run_own_data(unscored, tmp_path), "fixture")


def test_fixture_block_follows_the_conventions(tmp_path):
    """The fixture below names only what exists (so the slow run checks a block a README could hold)."""
    assert check_text(FIXTURE, "examples/fixture/README.md") == []


@pytest.mark.slow
def test_runner_takes_a_real_block_from_raw_text_to_a_score(tmp_path):
    folder = tmp_path / "examples" / "fixture"
    folder.mkdir(parents=True)
    (folder / "README.md").write_text(FIXTURE)
    work = tmp_path / "work"
    work.mkdir()
    p = run_own_data((folder / "README.md").read_text(), work)
    assert_scored(p, "fixture")
    assert (work / "ckpt" / "checkpoint_best.pt").is_file() and (work / "gen.out").stat().st_size > 0
