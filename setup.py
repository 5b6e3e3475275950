"""fairseq_ext: five NMT theses as one fairseq plugin.

Install (the README's set-up does this into .venv):
    PIP_CONSTRAINT=constraints.txt pip install --no-build-isolation -e .
torch is pinned to the CPU build 2.13.0 and fairseq to the Python-3.11 fork
fairseq-fixed 0.12.3.1 (built against the installed torch/numpy).
"""
from setuptools import find_packages, setup

setup(
    name="fairseq_ext",
    version="0.1.0",
    description="fairseq plugin: Ampomah, Nguyen, Maruf and Gu NMT systems",
    packages=find_packages(include=["fairseq_ext", "fairseq_ext.*"]),
    package_data={"fairseq_ext": ["py.typed", "tools/*/data/*.tsv"]},
    python_requires=">=3.11,<3.13",
    install_requires=[
        "torch==2.13.0",
        "fairseq-fixed==0.12.3.1",
        "numpy>=2.0",
        "sentencepiece==0.2.3",
        "sacrebleu==2.6.0",
        "subword-nmt==0.3.8",
        "matplotlib==3.11.2",
        "eflomal==2.0.0",  # word alignments for NAT fertility supervision (Gu ch. 8)
        "uroman==1.3.1.1",  # transliteration of any script (Nguyen ch. 3)
        "entmax==1.3",  # sparsemax of the hierarchical selective attention (Maruf ch. 4)
        "nltk==3.9.1",  # METEOR (exact + stem matching, no WordNet download) for Maruf ch. 3-4
        "tantivy==0.27.0",  # embedded BM25 translation-memory index (Gu ch. 4)
        "rapidfuzz==3.14.6",  # token-level edit distance of the fuzzy re-ranking (Gu ch. 4)
        "gensim==4.4.0",  # monolingual skip-gram embeddings of the universal lexical representation (Gu ch. 5)
    ],
    extras_require={
        "dev": ["pytest==9.2.0", "pytest-xdist==3.8.0", "ctranslate2==4.8.5"],
        "ctranslate2": ["ctranslate2==4.8.5"],  # fairseq-ext-export, recipes/bench/cpu_inference.py
        # fairseq_ext/tools/export/simuleval_agent.py (Gu ch. 9 agents under SimulEval). SimulEval 1.1.4 pins bitarray 2.6.0
        # and tqdm 4.64.1 (older than the core install's; neither is a torch or fairseq pin): install it in an
        # environment of its own, never into the one the tests run in
        "simuleval": ["simuleval==1.1.4"],
    },
    entry_points={
        "console_scripts": [
            # the offline tools (fairseq_ext/tools/, one CLI convention: fairseq_ext.tools.common)
            "fairseq-ext-data=fairseq_ext.tools.corpora.corpora:cli_main",
            "fairseq-ext-score=fairseq_ext.tools.evaluation.score:cli_main",
            "fairseq-ext-transfer=fairseq_ext.tools.corpora.transfer:cli_main",
            "fairseq-ext-transliterate=fairseq_ext.tools.corpora.transliterate:cli_main",
            "fairseq-ext-unk-copy=fairseq_ext.tools.corpora.unk_copy:cli_main",
            "fairseq-ext-distill=fairseq_ext.tools.corpora.distill:cli_main",
            "fairseq-ext-fertility=fairseq_ext.tools.corpora.fertility:cli_main",
            "fairseq-ext-lexicon=fairseq_ext.tools.analysis.lexicon:cli_main",
            "fairseq-ext-arthur-lexicon=fairseq_ext.tools.corpora.arthur_lexicon:cli_main",
            "fairseq-ext-analysis=fairseq_ext.tools.analysis.analysis:cli_main",
            "fairseq-ext-tiny=fairseq_ext.tools.corpora.tiny:cli_main",
            "fairseq-ext-synthetic-rules=fairseq_ext.tools.corpora.synthetic_rules:cli_main",
            "fairseq-ext-dialogue-patterns=fairseq_ext.tools.corpora.dialogue_patterns:cli_main",
            "fairseq-ext-contrastive=fairseq_ext.tools.evaluation.contrastive:cli_main",
            "fairseq-ext-tm=fairseq_ext.tools.tm.retrieval:cli_main",
            "fairseq-ext-ulr=fairseq_ext.tools.corpora.ulr:cli_main",
            "fairseq-ext-bt=fairseq_ext.tools.corpora.back_translation:cli_main",
            "fairseq-ext-export=fairseq_ext.tools.export.export:cli_main",
            "fairseq-ext-translate=fairseq_ext.tools.export.translate:cli_main",
            "fairseq-ext-simul-latency=fairseq_ext.tools.evaluation.simul_latency:cli_main",
            "fairseq-ext-conversations=fairseq_ext.tools.corpora.conversations:cli_main",
            "fairseq-ext-doc-consistency=fairseq_ext.tools.evaluation.doc_consistency:cli_main",
            "fairseq-ext-doc-context=fairseq_ext.tools.corpora.doc_context:cli_main",
            "fairseq-ext-diagnostics=fairseq_ext.tools.analysis.diagnostics:cli_main",
            # fairseq's own CLIs with the plugin loaded
            "fairseq-ext-train=fairseq_ext.cli:train_main",
            "fairseq-ext-generate=fairseq_ext.cli:generate_main",
            "fairseq-ext-interactive=fairseq_ext.cli:interactive_main",
        ]
    },
)
