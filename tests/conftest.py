import os
import sys

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, os.path.dirname(__file__))

from harness import prepare_tiny  # noqa: E402


@pytest.fixture(scope="session")
def tiny_bin(tmp_path_factory):
    """The committed tiny es-en Bible slice, sentencepiece-segmented (300) and binarized once."""
    return prepare_tiny(tmp_path_factory.mktemp("bible_tiny"))
