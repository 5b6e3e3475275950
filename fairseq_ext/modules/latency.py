r"""Latency of simultaneous translation: the metrics papers report today, on the delays of one sentence.

The delay g(τ) of target token τ is the number of source tokens read when it was written
(:func:`delays_from_actions`); units as in Gu 2019 ch. 9 (subwords, ⟨/s⟩ counted). Every function is defined
as SimulEval computes it; where SimulEval's choice of |Y| differs from the paper that introduced the
metric, both are given under their own names.

* **AP**, average proportion (Cho & Esipova 2016; Gu 2019 Eq. 9.7): :func:`average_proportion`.
* **CW**, consecutive wait: :func:`consecutive_wait`.
* **AL**, average lagging (Ma et al. 2019): :func:`average_lagging_hyp` (|Y| the hypothesis),
  :func:`average_lagging_ref` (SimulEval's, |Y| the reference), :func:`average_lagging` (|Y| given).
* **LAAL** (Papi et al. 2022): :func:`length_adaptive_average_lagging`.
* **DAL** (Cherry & Foster 2019): :func:`differentiable_average_lagging`.
* **AL_CA**, computation-aware AL (Ma et al. 2020), in seconds: :func:`computation_aware_average_lagging`.

The corpus score of every metric is the mean of the sentence scores (SimulEval's convention).

References: Cho, Esipova, "Can neural machine translation do simultaneous translation?", 2016; Ma et al.,
"STACL: Simultaneous Translation with Implicit Anticipation and Controllable Latency using Prefix-to-Prefix
Framework", ACL 2019; Cherry, Foster, "Thinking Slow about Latency Evaluation for Simultaneous Machine
Translation", 2019; Ma, Pino, Koehn, "SimulMT to SimulST: Adapting Simultaneous Text Translation to End-to-End
Simultaneous Speech Translation", AACL 2020; Papi, Gaido, Negri, Turchi, "Over-Generation Cannot Be Rewarded:
Length-Adaptive Average Lagging for Simultaneous Speech Translation", AutoSimTrans 2022; Gu, "Efficient Neural
Machine Translation", PhD thesis, The University of Hong Kong, 2019 (ch. 9).
"""
from typing import Dict, List, Optional, Sequence, Union

READ, WRITE = 0, 1

Actions = Union[str, Sequence[int]]


# ============================================================================================ actions
def action_codes(actions: Actions) -> List[int]:
    """READ/WRITE codes of ``actions``: a string of ``R``/``W`` or a sequence of 0 (READ) / 1 (WRITE)."""
    if isinstance(actions, str):
        table = {"R": READ, "W": WRITE}
        try:
            return [table[a] for a in actions.upper()]
        except KeyError as e:
            raise ValueError(f"actions must be R/W characters, got {actions!r}") from e
    codes = [int(a) for a in actions]
    if any(a not in (READ, WRITE) for a in codes):
        raise ValueError(f"actions must be {READ} (READ) or {WRITE} (WRITE), got {list(actions)}")
    return codes


def action_string(actions: Actions) -> str:
    return "".join("W" if a == WRITE else "R" for a in action_codes(actions))


def delays_from_actions(actions: Actions, src_len: int, first_read: int = 1) -> List[int]:
    """g(τ) of every WRITE: the source tokens read when it happened. ``first_read`` tokens are read before
    the first action (Alg. 4: x_1); a READ once all ``src_len`` tokens are read is a no-op."""
    eta, delays = min(first_read, src_len), []
    for a in action_codes(actions):
        if a == WRITE:
            delays.append(eta)
        else:
            eta = min(eta + 1, src_len)
    return delays


def read_runs(actions: Actions) -> List[int]:
    """The lengths of the non-empty READ runs that end in a WRITE, in order."""
    runs, current = [], 0
    for a in action_codes(actions):
        if a == READ:
            current += 1
        else:
            if current:
                runs.append(current)
            current = 0
    return runs


# ============================================================================================ metrics
def average_proportion(delays: Sequence[float], src_len: int, tgt_len: Optional[int] = None) -> float:
    """AP (Eq. 9.7): Σ_τ g(τ) / (|X|·|Y|), |Y| = ``tgt_len`` (default: the number of delays)."""
    n = len(delays) if tgt_len is None else tgt_len
    if n <= 0 or src_len <= 0:
        raise ValueError("average proportion of an empty source or target")
    return float(sum(delays)) / (src_len * n)


def consecutive_wait(actions: Actions) -> float:
    """CW: the mean length of the non-empty READ runs that end in a WRITE (0 without any)."""
    runs = read_runs(actions)
    return float(sum(runs)) / len(runs) if runs else 0.0


def average_lagging(delays: Sequence[float], src_len: float, tgt_len: Optional[int] = None) -> float:
    """AL: (1/τ_g) Σ_{τ=1}^{τ_g} [g(τ) − (τ−1)/γ], γ = |Y|/|X| with |Y| = ``tgt_len`` (default the hypothesis
    length), τ_g the first τ with g(τ) ≥ |X|; g(1) when g(1) > |X| (SimulEval's ``ALScorer.compute``)."""
    if not delays:
        raise ValueError("average lagging of an empty hypothesis")
    if src_len <= 0:
        raise ValueError("average lagging of an empty source")
    if delays[0] > src_len:
        return float(delays[0])
    gamma = (len(delays) if tgt_len is None else tgt_len) / src_len
    total, tau = 0.0, 0
    for t_minus_1, d in enumerate(delays):
        total += d - t_minus_1 / gamma
        tau = t_minus_1 + 1
        if d >= src_len:
            break
    return total / tau


def average_lagging_hyp(delays: Sequence[float], src_len: int) -> float:
    """AL as Ma et al. (2019) define it: the rate γ = |Y|/|X| with |Y| the hypothesis length."""
    return average_lagging(delays, src_len, len(delays))


def average_lagging_ref(delays: Sequence[float], src_len: int, ref_len: Optional[int]) -> float:
    """SimulEval's AL: γ = |Y*|/|X| with |Y*| the reference length (the hypothesis length when ``ref_len`` is
    ``None``, as SimulEval without a reference)."""
    return average_lagging(delays, src_len, len(delays) if ref_len is None else ref_len)


def length_adaptive_average_lagging(delays: Sequence[float], src_len: int, ref_len: Optional[int]) -> float:
    """LAAL (Papi et al. 2022): AL with γ = max(|Y|, |Y*|)/|X| (|Y| the hypothesis, |Y*| = ``ref_len``; without
    a reference, |Y*| = |Y|)."""
    hyp = len(delays)
    return average_lagging(delays, src_len, hyp if ref_len is None else max(hyp, ref_len))


def differentiable_average_lagging(delays: Sequence[float], src_len: int) -> float:
    """DAL (Cherry & Foster 2019, as SimulEval computes it): g'(1) = g(1), g'(τ) = max(g(τ), g'(τ−1) + 1/γ),
    DAL = (1/|Y|) Σ_τ [g'(τ) − (τ−1)/γ], γ = |Y|/|X| (|Y| the hypothesis length)."""
    if not delays:
        raise ValueError("differentiable average lagging of an empty hypothesis")
    gamma = len(delays) / src_len
    total, last = 0.0, 0.0
    for i_minus_1, g in enumerate(delays):
        g_prime = float(g) if i_minus_1 == 0 else max(float(g), last + 1 / gamma)
        total += g_prime - i_minus_1 / gamma
        last = g_prime
    return total / len(delays)


def elapsed_times(delays: Sequence[float], timestamps: Sequence[float], source_token_seconds: float,
                  start: float = 0.0) -> List[float]:
    """SimulEval's elapsed time of every target token: e(τ) = g(τ)·Δ + (t_τ − t_0), Δ = ``source_token_seconds``
    (the time one source token takes to arrive), t_τ the wall-clock time token τ was written, t_0 = ``start``."""
    if len(timestamps) != len(delays):
        raise ValueError(f"{len(timestamps)} timestamps for {len(delays)} target tokens")
    if source_token_seconds <= 0:
        raise ValueError(f"the source token duration must be > 0, got {source_token_seconds}")
    return [g * source_token_seconds + (t - start) for g, t in zip(delays, timestamps)]


def computation_aware_average_lagging(delays: Sequence[float], timestamps: Sequence[float], src_len: int,
                                      source_token_seconds: float, tgt_len: Optional[int] = None,
                                      start: float = 0.0) -> float:
    """AL_CA (seconds): :func:`average_lagging` of the :func:`elapsed_times` against a source of duration
    |X|·Δ; ``tgt_len`` as for AL (SimulEval passes the reference length when it has one)."""
    elapsed = elapsed_times(delays, timestamps, source_token_seconds, start)
    return average_lagging(elapsed, src_len * source_token_seconds, tgt_len)


def latency(actions: Actions, src_len: int, ref_len: Optional[int] = None, first_read: int = 1) -> Dict:
    """``{"delays", "ap", "cw", "al", "al_hyp", "laal", "dal"}`` of one sentence's actions: ``al`` is
    SimulEval's (γ from ``ref_len`` when given), ``al_hyp`` Ma et al.'s (γ from the hypothesis), ``laal``
    LAAL; without ``ref_len`` the three are equal."""
    delays = delays_from_actions(actions, src_len, first_read)
    return {"delays": delays, "ap": average_proportion(delays, src_len), "cw": consecutive_wait(actions),
            "al": average_lagging_ref(delays, src_len, ref_len), "al_hyp": average_lagging_hyp(delays, src_len),
            "laal": length_adaptive_average_lagging(delays, src_len, ref_len),
            "dal": differentiable_average_lagging(delays, src_len)}
