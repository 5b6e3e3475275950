"""``--help`` lists the options of the named task, architecture and criterion (compat fix 12), for the plugin's
registrations and fairseq's own, in fairseq-train, fairseq-generate and fairseq-interactive -- and in
``options.parse_args_and_arch`` called with ``--user-dir`` in its arguments (the plugin then loads inside it)."""
import sys

import pytest

from harness import BIN, USER_DIR, run

DOC_OPTIONS = ("--doc-context-mode", "--doc-ids-dir")


def help_of(tool, *args, user_dir=True):
    cmd = [BIN / f"fairseq-{tool}"] + (["--user-dir", USER_DIR] if user_dir else []) + [*args, "--help"]
    p = run(cmd, check=False, timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "Traceback" not in p.stderr
    return p.stdout


def test_train_help_shows_the_task_options_without_data():
    out = help_of("train", "--task", "doc_translation")
    for opt in DOC_OPTIONS + ("--cpu-bf16", "--gnmt-alpha", "--decoding-algorithm"):  # and its base tasks'
        assert opt in out, opt
    assert "--label-smoothing" not in out  # the default criterion's options only


def test_train_help_shows_the_arch_and_criterion_options():
    out = help_of("train", "--task", "doc_translation", "--arch", "transformer_twt", "--criterion", "actor_critic")
    for opt in DOC_OPTIONS + ("--twt-init", "--norm-type", "--tg-objective", "--critic-updates"):
        assert opt in out, opt


def test_train_help_shows_fairseqs_own_task_and_arch_options():
    out = help_of("train", "--task", "translation_lev", "--arch", "lstm", "--criterion", "label_smoothed_cross_entropy")
    for opt in ("--noise", "--encoder-hidden-size", "--label-smoothing"):
        assert opt in out, opt


@pytest.mark.parametrize("tool", ["generate", "interactive"])
def test_generate_and_interactive_help_show_the_task_options(tool):
    out = help_of(tool, "--task", "doc_translation")
    for opt in DOC_OPTIONS + ("--beam",):
        assert opt in out, opt


def test_parse_args_and_arch_loading_the_plugin_shows_its_help():
    """The plugin is imported by ``parse_args_and_arch`` itself, after the parser was built (sys.argv names no
    --user-dir): the first parse of that very call must not answer --help yet."""
    args = ["--user-dir", str(USER_DIR), "--task", "doc_translation", "--arch", "transformer_twt", "--help"]
    code = ("from fairseq import options; "
            f"options.parse_args_and_arch(options.get_training_parser(), {args!r})")
    p = run([sys.executable, "-c", code], check=False, timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
    for opt in DOC_OPTIONS + ("--twt-init",):
        assert opt in p.stdout, opt


def test_parsing_without_help_is_unchanged():
    from fairseq import options

    args = options.parse_args_and_arch(options.get_training_parser(), [
        "DATA", "--user-dir", str(USER_DIR), "--task", "doc_translation", "--arch", "transformer_twt",
        "--doc-context-mode", "online", "--twt-init", "xavier"])
    assert (args.data, args.doc_context_mode, args.twt_init) == ("DATA", "online", "xavier")
    parser = options.get_training_parser()
    with pytest.raises(SystemExit):  # the task's positional data is required (after the task's options are added)
        options.parse_args_and_arch(parser, ["--user-dir", str(USER_DIR), "--task", "doc_translation",
                                             "--arch", "transformer_twt"])
    assert "parse_known_args" not in vars(parser)  # the parser is argparse's again


def test_every_console_script_of_setup_py_answers_help():
    """Each ``fairseq-ext-*`` entry point of setup.py is installed and its module's parser runs (a moved module or a
    stale entry point fails here)."""
    import re
    from pathlib import Path

    setup = (Path(__file__).resolve().parents[1] / "setup.py").read_text()
    scripts = re.findall(r'"(fairseq-ext-[a-z0-9-]+)=', setup)
    assert "fairseq-ext-doc-context" in scripts and len(scripts) > 20
    for name in scripts:
        p = run([BIN / name, "--help"], check=False, timeout=120)
        assert p.returncode == 0 and "Traceback" not in p.stderr, (name, p.stderr[-2000:])
        assert "usage" in p.stdout.lower(), name
