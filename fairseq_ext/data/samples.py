"""Helpers on collated fairseq samples (dicts of tensors whose first dimension is the batch)."""
import torch


def subset_sample(sample, index: torch.Tensor, batch_size: int):
    """The rows ``index`` of every tensor of ``sample`` whose first dimension is the batch."""
    if isinstance(sample, dict):
        return {k: subset_sample(v, index, batch_size) for k, v in sample.items()}
    if torch.is_tensor(sample) and sample.dim() > 0 and sample.size(0) == batch_size:
        return sample.index_select(0, index.to(sample.device))
    return sample
