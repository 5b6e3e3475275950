"""The fertility-NAT tests' toys (not a test module): a hand-made batch of two sentences with their fertilities and
its fairseq sample."""
import torch


PAD, EOS = 1, 2


def fertility_batch():
    # two sentences, left-padded, <eos> at the end; fertilities sum to the target lengths 4 and 6
    src = torch.tensor([[PAD, PAD, 10, 11, 12, EOS], [13, 14, 15, 16, 17, EOS]])
    fert = torch.tensor([[0, 0, 1, 2, 1, 0], [1, 0, 3, 1, 1, 0]])
    tgt = torch.tensor([[20, 21, 22, 23, PAD, PAD], [20, 21, 22, 23, 24, 25]])
    return src, torch.tensor([4, 6]), fert, tgt


def fertility_sample():
    src, lengths, fert, tgt = fertility_batch()
    return {"net_input": {"src_tokens": src, "src_lengths": lengths}, "fertility": fert, "target": tgt,
            "ntokens": int(tgt.ne(PAD).sum()), "nsentences": 2, "id": torch.arange(2)}
