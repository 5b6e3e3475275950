"""Gu ch. 6, Eq. 6.3: the proximal prior β‖θ − θ^0‖² during fine-tuning, measured — one meta-learned
checkpoint (``meta_translation``, ``--criterion metanmt_cross_entropy``), then ``ulr_finetune_translation`` from
it with ``--proximal-weight β`` for each β (θ^0 = the meta checkpoint, ``--finetune-from-model``), the same
seed and batches, no early stopping: dev loss / dev BLEU (greedy) every ``--valid-every`` updates, and the final
distance ‖θ − θ^0‖ of the fine-tuned parameters.

    python examples/meta_nmt/proximal.py --data DATA/bin_meta --out runs/gu_ch6_proximal

DATA is a folder of recipes/gu/ch6.sh (``fairseq-ext-data universal`` + ULR arrays + ``report.py splits``;
``--build-tiny`` builds the recipe's DATA=tiny one from tests/data/bible_multi_tiny). Writes OUT/curves.csv,
OUT/summary.json, OUT/proximal_curves.png (``--png`` also copies it) and each run's log.
"""
import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

import torch

from fairseq_ext.tools.evaluation.fairseq_log import parse_curve, plot_curves, write_curves_csv
from fairseq_ext.tools.evaluation import bench_configs

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
TINY_MULTI = ROOT / "tests" / "data" / "bible_multi_tiny" / "multi.tsv"


def sh(cmd, log: Path):
    with open(log, "a", encoding="utf-8") as f:
        p = subprocess.run([str(c) for c in cmd], stdout=f, stderr=subprocess.STDOUT, cwd=ROOT)
    if p.returncode:
        sys.exit(f"error: {' '.join(map(str, cmd[:3]))} ... failed (see {log})")


def build_tiny(folder: Path, log: Path, meta_langs: str, valid_lang: str, target: str) -> Path:
    """The recipe's DATA=tiny folder (recipes/gu/ch6.sh's commands and settings)."""
    if not (folder / "bin_meta" / "splits.json").exists():
        py = sys.executable
        sh([py, "-m", "fairseq_ext.tools.corpora.corpora", "universal", "--multi", TINY_MULTI, "--aux",
            f"{meta_langs},{valid_lang}", "--lowres", target, "--lowres-tokens", 800, "--vocab-size", 150,
            "--lowres-mono", 0, "--out", folder], log)
        sh([BIN / "fairseq-ext-ulr", "embed", "--data", folder, "--dim", 16, "--epochs", 2, "--min-count", 1], log)
        sh([BIN / "fairseq-ext-ulr", "seed-dict", "--data", folder, "--min-count", 1], log)
        sh([BIN / "fairseq-ext-ulr", "project", "--data", folder], log)
        sh([py, Path(__file__).resolve().parent / "report.py", "splits", "--data", folder, "--meta-langs", meta_langs,
            "--valid-langs", valid_lang], log)
    return folder / "bin_meta"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, help="a bin_meta folder of recipes/gu/ch6.sh")
    ap.add_argument("--build-tiny", action="store_true", help="build the recipe's DATA=tiny folder under OUT/data")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--meta-langs", default="es,fr,ru,ar")
    ap.add_argument("--valid-lang", default="tl")
    ap.add_argument("--target", default="it")
    ap.add_argument("--arch", default="ulr_transformer_tiny")
    ap.add_argument("--meta-updates", type=int, default=300)
    ap.add_argument("--meta-lr", default="1e-3")
    ap.add_argument("--ft-updates", type=int, default=200)
    ap.add_argument("--ft-lr", default="1e-3")
    ap.add_argument("--strategy", default="all")
    ap.add_argument("--ft-seed", type=int, default=1, help="fine-tuning seed (batch order, dropout)")
    ap.add_argument("--valid-every", type=int, default=10)
    ap.add_argument("--max-tokens", type=int, default=512)
    ap.add_argument("--betas", default="0,0.01,0.1,1", help="the --proximal-weight values, comma-separated")
    ap.add_argument("--png", type=Path, help="copy the plot here too")
    a = ap.parse_args(argv)
    out = a.out
    out.mkdir(parents=True, exist_ok=True)
    data = build_tiny(out / "data", out / "data.log", a.meta_langs, a.valid_lang, a.target) if a.build_tiny \
        else a.data
    if data is None:
        sys.exit("error: give --data or --build-tiny")
    ud = ["--user-dir", ROOT / "fairseq_ext"]
    common = ["--arch", a.arch, "--ulr", "--criterion", "metanmt_cross_entropy", "--optimizer", "adam",
              "--adam-betas", "(0.9,0.98)", "--adam-eps", "1e-9", "--max-tokens", a.max_tokens, "--cpu",
              "--no-progress-bar", "--log-format", "simple", "--log-interval", a.valid_every,
              "--no-epoch-checkpoints"]
    meta_dir = out / "meta"
    meta_ckpt = meta_dir / "checkpoint_last.pt"
    if not meta_ckpt.exists():
        sh([BIN / "fairseq-train", data, *ud, "--task", "meta_translation", "--train-subset",
            f"train_meta_{a.valid_lang}", "--valid-subset", f"valid_{a.valid_lang}", "--meta-langs", a.meta_langs,
            "--inner-steps", 1, "--inner-optimizer", "adam", "--meta-gradient", "first_order", *common, "--seed", 1,
            "--lr", a.meta_lr, "--lr-scheduler", "inverse_sqrt", "--warmup-updates", 20,
            "--max-update", a.meta_updates, "--disable-validation", "--save-dir", meta_dir], out / "meta.log")
    theta0 = torch.load(meta_ckpt, map_location="cpu", weights_only=False)["model"]
    curves, summary = {}, {"settings": vars(a) | {"data": str(data), "out": str(out), "png": str(a.png)}, "runs": {}}
    for beta in a.betas.split(","):
        d = out / (f"ft_beta{beta}" + (f"_seed{a.ft_seed}" if a.ft_seed != 1 else ""))
        log = d / "train.log"
        if not (d / "checkpoint_last.pt").exists():
            shutil.rmtree(d, ignore_errors=True)
            d.mkdir(parents=True)
            sh([BIN / "fairseq-train", data, *ud, "--task", "ulr_finetune_translation", "--finetune-from-model",
                meta_ckpt, "--finetune-strategy", a.strategy, "--proximal-weight", beta, *common, "--seed", a.ft_seed,
                "--lr", a.ft_lr,
                "--lr-scheduler", "fixed", "--max-update", a.ft_updates, "--validate-interval", 1000,
                "--validate-interval-updates", a.valid_every, "--save-interval", 1000, "--eval-bleu",
                "--eval-bleu-args", json.dumps({"beam": 1, **bench_configs.DECODE_LIMITS}),
                "--eval-bleu-remove-bpe", "sentencepiece", "--best-checkpoint-metric", "loss", "--save-dir", d], log)
        rows = parse_curve(log.read_text(encoding="utf-8"))
        after = torch.load(d / "checkpoint_last.pt", map_location="cpu", weights_only=False)["model"]
        dist = sum(float(((after[k].float() - theta0[k].float()) ** 2).sum()) for k in theta0) ** 0.5
        best_loss = min(rows, key=lambda r: r["dev_loss"])
        best_bleu = max(rows, key=lambda r: r["dev_bleu"] or 0.0)
        curves[f"beta {beta}"] = rows
        summary["runs"][beta] = {"distance_to_theta0": round(dist, 4), "best_dev_loss": best_loss["dev_loss"],
                                 "best_dev_loss_updates": best_loss["updates"], "last_dev_loss": rows[-1]["dev_loss"],
                                 "best_dev_bleu": best_bleu["dev_bleu"], "best_dev_bleu_updates": best_bleu["updates"],
                                 "last_dev_bleu": rows[-1]["dev_bleu"], "train_wall_s": rows[-1]["train_wall_s"]}
    tag = f"_seed{a.ft_seed}" if a.ft_seed != 1 else ""
    write_curves_csv(out / f"curves{tag}.csv", curves)
    (out / f"summary{tag}.json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    png = out / f"proximal_curves{tag}.png"
    plot_curves(curves, png, f"fine-tuning {a.target} ({a.strategy}) from the meta-learned {a.arch}: proximal "
                             f"weight beta (Eq. 6.3), seed {a.ft_seed}")
    if a.png:
        shutil.copyfile(png, a.png)
    for beta, r in summary["runs"].items():
        print(f"beta {beta}: {json.dumps(r)}")


if __name__ == "__main__":
    main()
