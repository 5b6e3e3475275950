"""Early stopping (``--patience``) survives a resumption.

``fairseq_cli.train.should_stop_early`` keeps ``--patience``'s best value and count of validations without
improvement in memory only, so a resumed run would start counting again from zero (and compare against its first
new validation, not the best so far): a run interrupted once would train up to ``--patience`` validations longer
than an uninterrupted one.  :func:`install` saves both in the checkpoint's extra state and restores
them with it (not under ``--reset-meters`` / ``--reset-optimizer``, as fairseq's own best value), so a
resumed run stops at the update the uninterrupted run would have stopped at.  A checkpoint of a run trained
without ``--patience`` (continued to convergence with it) holds no such state: the count then starts from
fairseq's own best metric of that checkpoint, so validations below it count from the first one.

Applied once when the plugin registers (``fairseq_ext.modules`` imports every module of this folder).
"""
import logging

logger = logging.getLogger(__name__)

PATIENCE_STATE = "fairseq_ext_patience"


def install() -> None:
    """Keep ``should_stop_early``'s state (best, num_runs) in checkpoints; restore it on resumption (from a
    checkpoint without it: best = the checkpoint's best metric, no validation counted yet)."""
    import inspect
    import sys

    from fairseq import trainer as trainer_mod

    save, load = trainer_mod.Trainer.save_checkpoint, trainer_mod.Trainer.load_checkpoint
    if getattr(save, "_fairseq_ext_patience", False):
        return
    sig = inspect.signature(load)

    def save_checkpoint(self, filename, extra_state):
        train = sys.modules.get("fairseq_cli.train")
        stop = getattr(train, "should_stop_early", None)
        if isinstance(extra_state, dict) and getattr(stop, "best", None) is not None:
            extra_state[PATIENCE_STATE] = {"best": float(stop.best), "num_runs": int(getattr(stop, "num_runs", 0))}
        return save(self, filename, extra_state)

    def load_checkpoint(self, *args, **kwargs):
        extra_state = load(self, *args, **kwargs)
        bound = sig.bind(self, *args, **kwargs).arguments
        state = (extra_state or {}).get(PATIENCE_STATE)
        if state is None and (extra_state or {}).get("best") is not None:
            # a run without --patience saved none: count from the checkpoint's own best metric (fairseq's
            # ``save_checkpoint.best``, the same --best-checkpoint-metric), not from the first new validation
            state = {"best": float(extra_state["best"]), "num_runs": 0}
        train = sys.modules.get("fairseq_cli.train")
        if state and train is not None and not bound.get("reset_meters") and not bound.get("reset_optimizer"):
            train.should_stop_early.best = state["best"]
            train.should_stop_early.num_runs = state["num_runs"]
            logger.info("early stopping resumed: best %s, %d validation(s) without improvement",
                        state["best"], state["num_runs"])
        return extra_state

    save_checkpoint._fairseq_ext_patience = True
    save_checkpoint.__wrapped__ = save
    load_checkpoint.__wrapped__ = load
    trainer_mod.Trainer.save_checkpoint = save_checkpoint
    trainer_mod.Trainer.load_checkpoint = load_checkpoint


install()
