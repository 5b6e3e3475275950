import os

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")

from harness import prepare_tiny, train_nmt  # noqa: E402  (pytest puts this folder on sys.path: no package here)


@pytest.fixture(scope="session")
def tiny_bin(tmp_path_factory):
    """The committed tiny es-en Bible slice, sentencepiece-segmented (300) and binarized once."""
    return prepare_tiny(tmp_path_factory.mktemp("bible_tiny"))


@pytest.fixture(scope="session")
def nmt_ckpt(tiny_bin, tmp_path_factory):
    """The tiny NMT (read-only): rnnsearch_tiny (conditional GRU), 20 MLE updates on the tiny slice -- the
    decoding tests' model and the frozen NMT under trainable greedy decoding."""
    return train_nmt(tiny_bin, tmp_path_factory.mktemp("rnnsearch_nmt"), max_update=20)


@pytest.fixture(scope="session")
def uni_nmt_ckpt(tiny_bin, tmp_path_factory):
    """The simultaneous agent's frozen environment (read-only): rnnsearch_tiny --encoder-unidirectional (uni-GRU
    encoder), 30 MLE updates on the tiny slice."""
    return train_nmt(tiny_bin, tmp_path_factory.mktemp("uni_rnnsearch_nmt"), "--encoder-unidirectional", max_update=30)


def pytest_addoption(parser):
    parser.addoption("--run-slow", action="store_true",
                     help="also run the tests marked slow (recipe end-to-end runs of several minutes each)")


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: a recipe end-to-end run of minutes; deselected unless --run-slow "
                                       "(every registered name keeps its own fast CPU test in the default run)")


def pytest_collection_modifyitems(config, items):
    """The default run (scripts/run_tests.sh, CI) leaves the slow tests out -- deselected, not skipped, and
    counted in pytest's summary; ``--run-slow`` (or ``-m slow``) runs them."""
    if config.getoption("--run-slow") or "slow" in (config.getoption("-m") or ""):
        return
    slow = [item for item in items if item.get_closest_marker("slow")]
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [item for item in items if not item.get_closest_marker("slow")]


@pytest.fixture(scope="module")
def simul_built(tiny_bin, uni_nmt_ckpt):
    """(cfg, task, model, criterion) of simul_agent_tiny on uni_nmt_ckpt as fairseq-train builds them; once per test
    module (its tests change the agent's weights)."""
    from simul_toys import build

    return build(tiny_bin, uni_nmt_ckpt)
