"""The simultaneous-translation tests' toys (not a test module): the ``simul_rl_translation`` command line, its
(cfg, task, model, criterion) built as fairseq-train builds them on the frozen uni-directional NMT, and the random
agent."""
from harness import randomise_parameters, train_objects


# uni_nmt_ckpt (conftest.py): the frozen environment, rnnsearch_tiny --encoder-unidirectional (uni-GRU encoder),
# 30 MLE updates on the tiny slice.
def agent_args(tiny_bin, nmt, *extra, arch="simul_agent_tiny"):
    return [str(tiny_bin), "--task", "simul_rl_translation", "--arch", arch, "--nmt-path", str(nmt),
            "--criterion", "simul_policy_gradient", "--optimizer", "adam", "--lr", "2e-3", "--lr-scheduler", "fixed",
            "--simul-max-len-a", "0.5", "--simul-max-len-b", "5", "--cpu", "--seed", "1", *extra]


def build(tiny_bin, nmt, *extra, arch="simul_agent_tiny"):
    """(cfg, task, model, criterion) exactly as fairseq-train builds them."""
    return train_objects(*agent_args(tiny_bin, nmt, *extra, arch=arch))


def randomise_agent(model, seed=0, scale=1.0):
    randomise_parameters(model.agent, seed, scale)
