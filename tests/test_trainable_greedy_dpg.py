"""Trainable greedy decoding (Gu 2019 ch. 7) on toys whose answer is known: the deterministic policy gradient of
Eqs. 7.3/7.5 through a critic that rewards one first word moves greedy decoding's first word to it, and the critic
of Eq. 7.2 fits the BLEU+1 of its rollouts — both through the ``actor_critic`` criterion's own updates, on the tiny
frozen NMT (conftest ``nmt_ckpt``)."""
import torch

from harness import task_batch
from test_trainable_greedy import build


class FirstWordCritic(torch.nn.Module):
    """A critic with the interface of :class:`fairseq_ext.modules.actor_critic.Critic` that knows the reward of a
    1-step toy: R = 1 when the first word is ``best`` (per sentence), else 0. Its raw score is the log-odds of
    p(best | z_1) under the decoder's own step-1 distribution, recomputed from the trajectory's z_1 with the step's
    fixed embedding ε_I[⟨eos⟩] and context c_1 (the actor's state site leaves c_1 unperturbed): sigmoid(raw) =
    p(best), the expected reward of a soft first choice, with an exact gradient w.r.t. z_1."""

    def __init__(self, decoder, e_bos, ctx1, best):
        super().__init__()
        self.parts = (decoder,)  # not a submodule: the frozen NMT's parameters stay out of this module
        self.e_bos, self.ctx1, self.best = e_bos, ctx1, best

    def encode(self, ref_tokens):
        return {"row": torch.arange(ref_tokens.size(0))}

    def logits1(self, z1, rows):
        dec = self.parts[0]
        feats = torch.tanh(dec.readout(torch.cat([z1, self.e_bos[rows], self.ctx1[rows]], -1)))
        return dec.output_layer(feats)

    def forward(self, memory, index, states, tokens, lengths):
        rows = memory["row"].index_select(0, index)
        lp = torch.log_softmax(self.logits1(states[:, 0], rows), -1).gather(1, self.best[rows, None]).squeeze(1)
        return lp - torch.log(-torch.expm1(lp).clamp(max=-1e-12))


def step1(model, enc, B):
    """(logits (B, V), c_1 (B, C)) of the first decoding step with the model's actor as it is, no noise."""
    prev = torch.full((B, 1), model.decoder.dictionary.eos(), dtype=torch.long)
    logits, extra = model.decoder(prev, encoder_out=enc)
    values = enc["encoder_out"][0].transpose(0, 1)
    return logits[:, 0], torch.bmm(extra["attn"][0][:, :1], values).squeeze(1)


def test_actor_updates_through_a_first_word_critic_move_greedy_to_the_rewarded_word(tiny_bin, nmt_ckpt):
    """1-step toy, optimum known (the plain NMT's runner-up first word ``best`` is worth 1, every other word 0; its
    greedy first word is ``base``): the first actor update of the criterion raises p(best) at step 1 on every
    sentence, and a few more make greedy decoding with the actor start with ``best`` on every sentence."""
    _, task, model, crit = build(tiny_bin, nmt_ckpt, "--critic-updates", "0", "--actor-updates", "1",
                                 "--tg-actor-samples", "2", "--tg-uniform-weights")
    model.train()
    sample = task_batch(task, n=4)
    net = sample["net_input"]
    B = net["src_tokens"].size(0)
    d = task.target_dictionary
    with torch.no_grad():
        enc = model.encoder(net["src_tokens"], src_lengths=net["src_lengths"])
        logits0, ctx1 = step1(model, enc, B)
        banned = logits0.clone()
        banned[:, : d.nspecial] = -float("inf")
        base = banned.argmax(1)
        best = banned.scatter(1, base[:, None], -float("inf")).argmax(1)
        e_bos = model.decoder.embed_tokens(torch.full((B,), d.eos(), dtype=torch.long))
    critic = FirstWordCritic(model.decoder, e_bos, ctx1, best)
    with torch.no_grad():  # the stub reproduces the decoder's step-1 logits from z_1
        z1 = model.trajectory(enc, torch.full((B, 1), d.eos(), dtype=torch.long))[:, 0]
        assert torch.allclose(critic.logits1(z1, torch.arange(B)), logits0, atol=1e-5)
    model.critic = critic

    def p_best():
        with torch.no_grad():
            lg, _ = step1(model, enc, B)
        return torch.softmax(lg, -1).gather(1, best[:, None]).squeeze(1)

    def first_words():
        with torch.no_grad():
            hyps = task.greedy_rollouts(model, enc, net["src_tokens"], B, 0.0, 3)
        return torch.stack([h[0] for h in hyps])

    assert torch.equal(first_words(), base)
    opt = torch.optim.RMSprop(model.actor.parameters(), lr=1e-2)
    before = p_best()
    torch.manual_seed(0)
    for update in range(60):
        model.set_num_updates(update)
        assert crit.phase(update) == "actor"
        loss, sample_size, _ = crit(model, sample)
        opt.zero_grad()
        (loss / sample_size).backward()
        opt.step()
        if update == 0:
            assert bool((p_best() > before).all())
        if torch.equal(first_words(), best):
            break
    assert torch.equal(first_words(), best), (p_best(), update)


def test_critic_updates_fit_the_bleu_of_the_rollouts(tiny_bin, nmt_ckpt):
    """Eq. 7.2 through the criterion's critic phase: on fixed rollouts (the same noise each update) and the
    reference trajectories, the critic's squared error falls to a tenth and its predictions rank the rewards."""
    _, task, model, crit = build(tiny_bin, nmt_ckpt, "--critic-updates", "1", "--actor-updates", "0",
                                 "--tg-critic-samples", "3", "--tg-noise-std", "1.0", "--tg-max-len-a", "0",
                                 "--tg-max-len-b", "6")
    model.train()
    task.load_dataset("train")
    ds = task.dataset("train")
    short = [int(i) for i in ds.tgt_sizes.argsort(kind="stable") if ds.tgt_sizes[i] >= 6][:4]
    sample = ds.collater([ds[i] for i in short])  # four short verses: a fast critic

    def decode():
        torch.manual_seed(0)
        return crit.decode(model, sample, "critic")

    with torch.no_grad():
        out = decode()
    r = out["r"]
    assert float(r.std()) > 0.05  # rewards to fit: the references' 1.0 and the rollouts' BLEU+1
    err0 = float((out["rc"] - r).pow(2).mean())
    opt = torch.optim.Adam(model.critic.parameters(), lr=2e-2)
    for update in range(80):
        model.set_num_updates(update)
        assert crit.phase(update) == "critic"
        torch.manual_seed(0)
        loss, sample_size, _ = crit(model, sample)
        opt.zero_grad()
        (loss / sample_size).backward()
        opt.step()
    with torch.no_grad():
        out = decode()
    assert torch.equal(out["r"], r)
    err = float((out["rc"] - r).pow(2).mean())
    corr = torch.corrcoef(torch.stack([out["rc"], r]))[0, 1]
    assert err < err0 / 10 and float(corr) > 0.9, (err0, err, float(corr))
