"""fairseq's epoch iterator over batches of whole groups -- the documents of ``doc_translation`` (Maruf 2019
ch. 3-4) and the conversations of ``conversation_translation`` (ch. 5): training passes with a new group order
per epoch and long groups cut into chunks (:func:`fairseq_ext.data.grouped.group_batches`), fixed batches in
corpus order for validation and decoding.
"""
import logging

import numpy as np
from fairseq.data import iterators

from fairseq_ext.data.batching import VirtualEpochs

logger = logging.getLogger(__name__)


class GroupBatchIterator(iterators.EpochBatchIterator):
    """fairseq's iterator over ``make_batches(epoch, training)``: training-style group batches (shuffled
    groups, long ones cut) when the epoch is iterated with ``shuffle=True`` (fairseq-train), whole
    groups in corpus order otherwise (validation, ``fairseq-generate --gen-subset train``)."""

    def __init__(self, make_batches, **kwargs):
        self.make_batches = make_batches
        self.training_batches = True
        super().__init__(batch_sampler=self._batches, **kwargs)

    def _batches(self, dataset, epoch):
        return self.make_batches(epoch, self.training_batches)

    def next_epoch_itr(self, shuffle=True, fix_batches_to_gpus=False, set_dataset_epoch=True):
        if bool(shuffle) != self.training_batches:
            self.training_batches = bool(shuffle)
            self._frozen_batches = None
        return super().next_epoch_itr(shuffle=shuffle, fix_batches_to_gpus=fix_batches_to_gpus,
                                      set_dataset_epoch=set_dataset_epoch)


def groups_cut(index, batches) -> int:
    """How many groups (documents, conversations) of ``index`` the ``batches`` spread over more than one batch."""
    if not batches:
        return 0
    rows = np.concatenate(batches)
    batch_of = np.repeat(np.arange(len(batches)), [len(b) for b in batches])
    pairs = np.unique(np.stack([index.group_of[rows], batch_of], 1), axis=0)
    return int((np.bincount(pairs[:, 0]) > 1).sum())


def group_batch_iterator(task, dataset, a: dict, train: bool, n_updates: int, make_batches_of, n_groups: int,
                         what: str, cut_at_inference: bool = False) -> GroupBatchIterator:
    """fairseq's epoch iterator over batches of whole groups (documents, conversations) of ``dataset``.

    ``make_batches_of(index, num_tokens, keep, order=None, cut_long=False, max_tokens=, max_sentences=)`` packs the
    groups of ``dataset.index`` (in ``order``, a permutation of its ``n_groups`` groups) into batches of the kept
    (``keep``: within ``a["max_positions"]``) sentences. Training: a new group order per epoch (fairseq's seed
    and the epoch), groups longer than a batch cut into chunks, virtual epochs for ``--max-update`` budgets
    (:class:`~fairseq_ext.data.batching.VirtualEpochs`); inference (and any unshuffled pass): groups in corpus
    order, cut into chunks like in training with ``cut_at_inference`` (so validation and decoding never build a
    batch larger than a training batch), else whole. ``a``: the bound arguments of :meth:`get_batch_iterator`."""
    dataset.set_epoch(a["epoch"])
    seed = a["seed"]
    indices = np.arange(len(dataset), dtype=np.int64)
    if a["max_positions"] is not None:
        indices = task.filter_indices_by_size(indices, dataset, a["max_positions"], a["ignore_invalid_inputs"])
    keep = np.zeros(len(dataset), dtype=bool)
    keep[indices] = True
    num_tokens = dataset.num_tokens_vec(np.arange(len(dataset), dtype=np.int64))
    index = dataset.index
    pack = dict(max_tokens=a["max_tokens"], max_sentences=a["max_sentences"])

    def inference_batches() -> list:
        return make_batches_of(index, num_tokens, keep, cut_long=cut_at_inference, **pack)

    if train:
        def make_pass(p: int) -> list:
            rng = np.random.default_rng([seed, p])
            return make_batches_of(index, num_tokens, keep, order=rng.permutation(n_groups), cut_long=True, **pack)

        passes = VirtualEpochs(make_pass, n_updates * task._update_freq() * a["num_shards"]) \
            if n_updates > 0 else None

        def make_batches(epoch: int, training: bool) -> list:
            if not training:  # fairseq-generate --gen-subset train, or any unshuffled pass
                return inference_batches()
            return passes(dataset, epoch) if passes is not None else make_pass(epoch)
        logger.info("%s batches (whole %ss, shuffled per epoch; long ones cut into chunks)", what, what)
    else:
        fixed = inference_batches()
        big = sum(1 for b in fixed if a["max_tokens"] and len(b) * int(num_tokens[b].max()) > a["max_tokens"])
        cut = groups_cut(index, fixed) if cut_at_inference else 0
        logger.info("%s batches: %d batches%s%s", what, len(fixed),
                    f" ({cut} long {what}s cut into chunks within --max-tokens/--batch-size)" if cut else "",
                    f" ({big} above --max-tokens: " + ("single sentences longer than it)" if cut_at_inference else
                                                        f"a {what} is never cut at inference)") if big else "")

        def make_batches(epoch: int, training: bool) -> list:
            return fixed
    return GroupBatchIterator(
        make_batches, dataset=dataset, collate_fn=dataset.collater, seed=seed,
        num_shards=a["num_shards"], shard_id=a["shard_id"], num_workers=a["num_workers"],
        epoch=a["epoch"], buffer_size=a["data_buffer_size"], skip_remainder_batch=a["skip_remainder_batch"],
        grouped_shuffling=a["grouped_shuffling"], reuse_dataloader=getattr(task.cfg, "reuse_dataloader", True),
        persistent_workers=getattr(task.cfg, "persistent_workers", True))
