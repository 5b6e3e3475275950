"""``python -m fairseq_ext.tools.evaluation.bench_configs NAME``: the training flags of a benchmark configuration,
or one ``error:`` line (exit 2, no traceback) for a name that is not one."""
import subprocess
import sys


def run(*argv):
    return subprocess.run([sys.executable, "-m", "fairseq_ext.tools.evaluation.bench_configs", *argv],
                          capture_output=True, text=True)


def test_a_known_configuration_prints_its_task_and_flags():
    r = run("transformer")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("--task translation_ext --arch transformer")


def test_an_unknown_configuration_is_one_error_line():
    r = run("no_such_config")
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    assert r.stderr.startswith("error: 'no_such_config' is not a benchmark configuration; known: ")
    assert "jas_m11" in r.stderr
