"""The plugin's generators take fairseq's generation options (``--beam``, ``--max-len-a/-b``, ``--min-len``,
``--lenpen``, ``--unnormalized``) with fairseq's own defaults (``GenerationConfig``), read in one place
(``fairseq_ext.modules.generation_options.generation_default``): a task's ``build_generator`` given options without those fields
builds its generator with fairseq's defaults, and with given values uses them."""
from argparse import Namespace

import pytest
from fairseq.dataclass.configs import GenerationConfig

from harness import build_model, make_dictionary

FAIRSEQ = GenerationConfig()
GIVEN = dict(beam=3, max_len_a=1.5, max_len_b=7, min_len=2, lenpen=0.5, unnormalized=True)


def limits_of(gen):
    """(beam, max_len_a, max_len_b, min_len, lenpen, normalize_scores) of an autoregressive generator."""
    return (gen.beam_size, gen.max_len_a, gen.max_len_b, gen.min_len, gen.lenpen, gen.normalize_scores)


def expected(given):
    o = {**{k: getattr(FAIRSEQ, k) for k in GIVEN}, **given}
    return (o["beam"], o["max_len_a"], o["max_len_b"], o["min_len"], o["lenpen"], not o["unnormalized"])


def decoding_generator(args):
    from fairseq_ext.tasks.translation_decoding import TranslationDecodingConfig, TranslationDecodingTask

    d = make_dictionary()
    task = TranslationDecodingTask(TranslationDecodingConfig(decoding_algorithm="shrinking_beam"), d, d)
    return task.build_generator([build_model("rnnsearch_tiny")], args)


def conversation_generator(args):
    from fairseq_ext.tasks.conversation_translation import (
        ConversationTranslationConfig,
        ConversationTranslationTask,
    )

    model = build_model("bimsmt_tiny", dual="src_tgt", ctx_inject="initdec_adddec")
    d = model.dictionary
    return task_generator(ConversationTranslationTask(ConversationTranslationConfig(), d, d), model, args).decoders[0]


def task_generator(task, model, args):
    return task.build_generator([model], args)


@pytest.mark.parametrize("build", [decoding_generator, conversation_generator], ids=["shrinking_beam", "conversation"])
@pytest.mark.parametrize("given", [{}, GIVEN], ids=["fairseq_defaults", "given"])
def test_beam_generators_take_fairseqs_defaults_or_the_given_options(build, given):
    assert limits_of(build(Namespace(**given))) == expected(given)


@pytest.mark.parametrize("given", [{}, GIVEN], ids=["fairseq_defaults", "given"])
def test_doc_bcd_takes_fairseqs_defaults_or_the_given_options(given):
    from fairseq_ext.tasks.doc_translation import DocTranslationConfig, DocTranslationTask

    d = make_dictionary()
    task = DocTranslationTask(DocTranslationConfig(decoding_algorithm="doc_bcd"), d, d)
    gen = task.build_generator([build_model("docmem_tiny")], Namespace(**{k: v for k, v in given.items()
                                                                            if k != "beam"}))
    greedy = gen.doc_greedy
    assert (greedy.max_len_a, greedy.max_len_b, greedy.min_len, greedy.lenpen, greedy.normalize_scores) == \
        expected(given)[1:]


@pytest.mark.parametrize("given", [{}, GIVEN], ids=["fairseq_defaults", "given"])
def test_simultaneous_decoding_takes_fairseqs_length_defaults_or_the_given_ones(given):
    from fairseq_ext.tasks.simul_rl_translation import SimulRLTranslationConfig, SimulRLTranslationTask

    d = make_dictionary()
    task = SimulRLTranslationTask(SimulRLTranslationConfig(simul_policy="waitk"), d, d)
    gen = task.build_generator([build_model("rnnsearch_tiny", encoder_unidirectional=True)], Namespace(**given))
    env = gen.env_args
    assert (env["max_len_a"], env["max_len_b"], env["min_len"]) == expected(given)[1:4]


def test_no_decoding_task_or_generator_writes_a_fairseq_generation_default_again():
    """The generation options' fairseq defaults are read (``generation_default``), never written again: no
    ``getattr(args, "<option>", <default>)`` in the decoding tasks, no literal default of a length option or
    ``lenpen`` in the generators' signatures."""
    import re

    from harness import ROOT

    options = "|".join([*GenerationConfig.__dataclass_fields__, "max_len"])
    restated = re.compile(rf'getattr\(args, "({options})", |\b(max_len_a|max_len_b|max_len|min_len|lenpen): \w+ = [-\d.]+')
    files = [f"tasks/{t}.py" for t in ("translation_decoding", "doc_translation", "conversation_translation",
                                       "simul_rl_translation")]
    files += [f"generators/{g}.py" for g in ("conversation_online", "decoding", "doc_bcd", "simultaneous")]
    found = [f"{f}: {m.group(0)}" for f in files
             for m in restated.finditer((ROOT / "fairseq_ext" / f).read_text(encoding="utf-8"))]
    assert found == []


def test_the_npd_samples_option_is_one_field_off_by_default_in_both_tasks():
    """``--npd-samples`` means the same in the autoregressive task (``translation_decoding --decoding-algorithm
    npd``, Eq. 2.14) and the non-autoregressive one (``translation_fertility``, Eq. 8.7): one field, one default,
    0 = off (noisy parallel decoding is opt-in); asking for ``npd`` without samples is one clear error."""
    from fairseq_ext.data.errors import UserDataError
    from fairseq_ext.modules.generation_options import NPD_SAMPLES, NoisyParallelConfig
    from fairseq_ext.tasks.translation_decoding import TranslationDecodingConfig, TranslationDecodingTask
    from fairseq_ext.tasks.translation_fertility import TranslationFertilityConfig

    shared = NoisyParallelConfig.__dataclass_fields__["npd_samples"]
    for config in (TranslationDecodingConfig, TranslationFertilityConfig):
        assert config.__dataclass_fields__["npd_samples"] is shared, config.__name__
        assert config().npd_samples == NPD_SAMPLES == 0
    d = make_dictionary()
    task = TranslationDecodingTask(TranslationDecodingConfig(decoding_algorithm="npd"), d, d)
    with pytest.raises(UserDataError, match="--npd-samples N >= 1"):
        task.build_generator([build_model("rnnsearch_tiny")], Namespace())
    gen = TranslationDecodingTask(TranslationDecodingConfig(decoding_algorithm="npd", npd_samples=3), d, d) \
        .build_generator([build_model("rnnsearch_tiny")], Namespace())
    assert gen.samples == 3
