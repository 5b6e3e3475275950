"""The offline half of the Universal Lexical Representation (Gu 2019 thesis ch. 5, §5.3.1): monolingual
embeddings, seed dictionaries, the Procrustes projection (Eq. 5.4) and the arrays the ULR embedding
(:class:`fairseq_ext.modules.ulr.ULREmbedding`) loads. ``python -m fairseq_ext.tools.corpora.ulr <cmd>``
(``fairseq-ext-ulr``), on a data folder DIR written by ``fairseq-ext-data universal``.

Subcommands (in this order; each is skipped when its stamp is up to date, ``--force`` redoes it)::

    embed      skip-gram embeddings per language -> DIR/ulr/emb.<lang>.vec
    seed-dict  seed pairs source piece -> English piece (eflomal alignments, identical strings)
               -> DIR/ulr/seed.<lang>.tsv
    project    O_k = procrustes(seed queries, seed keys) (Eq. 5.4) -> DIR/ulr/query.npy, key.npy,
               universal.txt, alpha.npy (Eq. 5.5 α), rotation.npz, manifest.json
    closest    the nearest universal tokens of each source piece under q(u|x) (Eq. 5.3 with A = I)
    gates      the MoLE gate of a ``universal_rnn --mole`` checkpoint (Fig. 5.8), as JSON and heatmaps

Errors (one ``error: ...`` line, exit status 2): a language without its text / embeddings / seed file,
an unknown language code, an empty seed dictionary, a dict.src.txt symbol without a ``__<lang>`` suffix.

This module is the command line; the steps are :mod:`~fairseq_ext.tools.corpora.ulr_embed` (embed, seed-dict),
:mod:`~fairseq_ext.tools.corpora.ulr_project` (project, closest), :mod:`~fairseq_ext.tools.corpora.ulr_gates`
and the files they share :mod:`~fairseq_ext.tools.corpora.ulr_files`.
"""
from __future__ import annotations

from fairseq_ext.tools.common import ArgumentParser, ToolError, positive_int, run_cli
from fairseq_ext.tools.corpora.ulr_embed import cmd_embed, cmd_seed_dict
from fairseq_ext.tools.corpora.ulr_files import DEFAULT_TEMPERATURE, MODELS
from fairseq_ext.tools.corpora.ulr_gates import cmd_gates
from fairseq_ext.tools.corpora.ulr_project import cmd_closest, cmd_project

def build_parser() -> ArgumentParser:
    p = ArgumentParser(prog="fairseq-ext-ulr", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True, metavar="SUBCOMMAND")

    def common(sp: ArgumentParser, langs: bool = True) -> None:
        sp.add_argument("--data", required=True, help="data folder of `fairseq-ext-data universal` (DIR)")
        if langs:
            sp.add_argument("--langs", help="comma-separated source languages (default: the manifest's)")
        sp.add_argument("--force", action="store_true", help="redo the step even if its stamp matches")

    e = sub.add_parser("embed", help="monolingual skip-gram embeddings -> DIR/ulr/emb.<lang>.vec")
    common(e)
    e.add_argument("--dim", type=positive_int, default=100, help="default %(default)s")
    e.add_argument("--epochs", type=positive_int, default=5, help="default %(default)s")
    e.add_argument("--window", type=positive_int, default=5, help="default %(default)s")
    e.add_argument("--min-count", type=positive_int, default=1, help="default %(default)s")
    e.add_argument("--model", choices=MODELS, default="fasttext", help="default %(default)s")
    e.add_argument("--bucket", type=positive_int, default=200000,
                   help="fastText n-gram buckets (default %(default)s)")
    e.add_argument("--center", action="store_true",
                   help="mean-centre the unit vectors and renormalise (default: unit norm only, as the thesis)")
    e.add_argument("--seed", type=int, default=1)

    s = sub.add_parser("seed-dict", help="seed pairs source -> English -> DIR/ulr/seed.<lang>.tsv")
    common(s)
    s.add_argument("--max-pairs", type=positive_int, default=500, help="default %(default)s")
    s.add_argument("--min-count", type=positive_int, default=5, help="default %(default)s")
    s.add_argument("--no-symmetric", action="store_true",
                   help="use the forward eflomal links only (default: forward ∩ reverse)")
    s.add_argument("--seed", type=int, default=1)

    j = sub.add_parser("project", help="Procrustes projection -> query/key/universal/alpha in DIR/ulr")
    common(j, langs=False)
    j.add_argument("--num-universal", type=positive_int, default=20000,
                   help="M, the number of universal (English) tokens (default %(default)s; capped at the "
                        "English pieces with an embedding)")
    j.add_argument("--alpha-top", type=int, default=500,
                   help="α(x) = 1 for this many most frequent pieces per language (default %(default)s)")

    c = sub.add_parser("closest", help="nearest universal tokens of each source piece (TSV)")
    c.add_argument("--data", required=True)
    c.add_argument("--lang", help="only this source language")
    c.add_argument("--top", type=positive_int, default=5, help="default %(default)s")
    c.add_argument("--temperature", type=float, default=DEFAULT_TEMPERATURE, help="τ of Eq. 5.3 (default 0.05)")
    c.add_argument("--out", help="output TSV (default: stdout)")

    g = sub.add_parser("gates", help="MoLE gate activations per source piece of a checkpoint (JSONL + heatmap)")
    g.add_argument("--path", required=True, help="a universal_rnn checkpoint trained with --mole")
    g.add_argument("--data", required=True, help="its binarized data folder (DIR/bin)")
    g.add_argument("--split", default="test", help="default %(default)s")
    which = g.add_mutually_exclusive_group()
    which.add_argument("--n", type=positive_int, default=5, help="the first N sentences of the split (default "
                                                                  "%(default)s)")
    which.add_argument("--ids", help="comma-separated verse ids of DIR/raw/<split>.ids instead")
    g.add_argument("--json", required=True, help="output JSONL, one sentence a line")
    g.add_argument("--plot", required=True, help="output PNG, one heatmap (experts x pieces) per sentence")
    g.add_argument("--plot-n", type=positive_int, help="plot only the first N of the sentences (default: all)")
    g.add_argument("--summary", help="output JSON: mean gate, top-expert share, saturation, entropy over all pieces")
    return p


COMMANDS = {"embed": cmd_embed, "seed-dict": cmd_seed_dict, "project": cmd_project, "closest": cmd_closest,
            "gates": cmd_gates}


def main(argv=None) -> int:
    a = build_parser().parse_args(argv)
    if getattr(a, "alpha_top", 0) < 0:
        raise ToolError(f"--alpha-top must be >= 0, got {a.alpha_top}")
    if getattr(a, "temperature", 1.0) <= 0:
        raise ToolError(f"--temperature must be > 0, got {a.temperature}")
    COMMANDS[a.cmd](a)
    return 0


def cli_main(argv=None) -> None:
    """Console script ``fairseq-ext-ulr``."""
    run_cli(main, argv)


if __name__ == "__main__":
    cli_main()
