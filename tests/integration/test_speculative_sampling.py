"""Speculative sampling: assisted generation with `do_sample=True` samples exactly from the model's distribution.

The rule (Leviathan et al., 2023; Chen et al., 2023): the assistant draws each candidate `x` from its own processed
and warped distribution `q`; the model keeps it with probability `min(1, p(x) / q(x))`, `p` being its own processed
and warped distribution at that position; the first rejected candidate is replaced with a sample of the normalized
residual `max(0, p - q)`; after the last candidate, a sample of `p`. In a batch, every row accepts as many candidates
as the row that accepts the fewest: a row whose candidate was kept at that position keeps it (it must not draw it
again from the residual, which is the distribution of a rejected position).

On a vocabulary of 5 tokens, 3 new tokens from a fixed prompt have 125 continuations, whose exact probabilities are
computed here from the model's processed and warped distributions at every prefix (through `generate` itself, so with
the same logits processors and warpers). Thousands of continuations drawn with an assistant, in batches of identical
prompts and one prompt at a time, are checked against them with a chi-square test, and against as many drawn by plain
sampling. The checks can fail: a sampler written here that applies the rule passes them, and two wrong rules fail them
(the ratio with the assistant's unprocessed distribution; a rejected candidate replaced with a sample of `p` instead
of the residual). The whole file runs in well under two minutes on two cores.

What fails on stock v4.31.0: the batched tests (it refuses batches), the test of one prompt at a time (it samples
continuations the model gives no probability: its logits processors and warpers miss the position after the last
candidate) and the acceptance test. On the series without its sampling patch (the rule of v4.31.0: a candidate is kept
when it equals the model's own sample, exact too), only the acceptance test fails: a perfect assistant, the model's
own copy, then keeps about one candidate per round.
"""

import copy
import itertools

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel

VOCAB = 5
NEW_TOKENS = 3
PROMPT = [1, 2, 3]
PAD = 0
# name: (generate kwargs, the assistant's vocabulary)
CONFIGS = {
    "plain": (dict(top_k=0), VOCAB),
    "temperature-top-k": (dict(temperature=0.7, top_k=3), VOCAB),
    "top-p-repetition-penalty": (dict(top_k=0, top_p=0.8, repetition_penalty=1.5), VOCAB),
    "typical-eos": (dict(top_k=0, typical_p=0.9, eos_token_id=4), VOCAB),
    "smaller-assistant-vocabulary": (dict(top_k=0, temperature=1.3), VOCAB - 1),
}
ROWS, CALLS = 2500, 4  # batched draws: 10000 continuations per configuration
SINGLE_CALLS = 1200  # one prompt at a time
# the checks fail below this p-value (the seeds are fixed: the right rule passes them, the wrong ones are far below)
MIN_P_VALUE = 1e-6


def _model(seed, layers, scale, vocab=VOCAB):
    torch.manual_seed(seed)
    config = GPT2Config(vocab_size=vocab, n_embd=32, n_layer=layers, n_head=4, n_positions=64, eos_token_id=None)
    model = GPT2LMHeadModel(config).eval()
    with torch.no_grad():  # sharper, more different distributions than the default initialization gives
        model.lm_head.weight.mul_(scale)
    return model


_PAIRS = {}


def _pair(assistant_vocab):
    if assistant_vocab not in _PAIRS:
        _PAIRS[assistant_vocab] = (_model(0, 2, 6.0), _model(1, 1, 6.0, vocab=assistant_vocab))
    return _PAIRS[assistant_vocab]


def _kwargs(config):
    kwargs = dict(CONFIGS[config][0], do_sample=True, max_new_tokens=NEW_TOKENS, pad_token_id=PAD)
    kwargs.setdefault("eos_token_id", None)
    return kwargs


def _next_distributions(model, prefixes, config):
    """The processed and warped distribution of `model`'s next token after each prefix, as `generate` samples it."""
    kwargs = dict(_kwargs(config), max_new_tokens=1, output_scores=True, return_dict_in_generate=True)
    with torch.no_grad():
        out = model.generate(torch.tensor(prefixes), **kwargs)
    return out.scores[0].softmax(dim=-1)


def _exact(config):
    """{continuation: probability} over the `NEW_TOKENS` new tokens of the model (padded after EOS)."""
    target, _ = _pair(CONFIGS[config][1])
    eos = _kwargs(config)["eos_token_id"]
    probabilities = {(): 1.0}
    for _ in range(NEW_TOKENS):
        open_prefixes = [prefix for prefix in probabilities if eos is None or eos not in prefix]
        distributions = _next_distributions(target, [PROMPT + list(prefix) for prefix in open_prefixes], config)
        grown = {}
        for prefix, probability in probabilities.items():
            if eos is not None and eos in prefix:
                grown[prefix + (PAD,)] = probability
                continue
            distribution = distributions[open_prefixes.index(prefix)].tolist()
            for token, token_probability in enumerate(distribution):
                if token_probability > 0:
                    grown[prefix + (token,)] = probability * token_probability
        probabilities = grown
    return probabilities


def _continuations(sequences):
    new = sequences[:, len(PROMPT) :].tolist()
    # a batch whose rows all met EOS ends early: the rest is padding
    return [tuple(row + [PAD] * (NEW_TOKENS - len(row))) for row in new]


def _draw(config, assistant, rows, calls, seed):
    target, draft = _pair(CONFIGS[config][1])
    kwargs = _kwargs(config)
    if assistant:
        draft.generation_config.num_assistant_tokens_schedule = "constant"
        draft.generation_config.num_assistant_tokens = 2
        kwargs["assistant_model"] = draft
    drawn = []
    with torch.no_grad():
        for call in range(calls):
            torch.manual_seed(seed + call)
            drawn += _continuations(target.generate(torch.tensor([PROMPT] * rows), **kwargs))
    return drawn


def _chi_square_p_value(observed, expected):
    """p-value of the chi-square statistic of `observed` counts against `expected` ones (bins of expected count under
    5 merged into one)."""
    keep = expected >= 5
    observed = torch.cat([observed[keep], observed[~keep].sum(dim=0, keepdim=True)])
    expected = torch.cat([expected[keep], expected[~keep].sum(dim=0, keepdim=True)])
    if expected[-1] == 0:
        observed, expected = observed[:-1], expected[:-1]
    statistic = ((observed - expected) ** 2 / expected).sum()
    degrees = torch.tensor(float(len(expected) - 1), dtype=torch.float64)
    return torch.special.gammaincc(degrees / 2, statistic.double() / 2).item()


def _against_exact(drawn, exact):
    keys = sorted(exact)
    assert set(drawn) <= set(keys), f"continuations of probability 0: {sorted(set(drawn) - set(keys))[:5]}"
    observed = torch.tensor([float(drawn.count(key)) for key in keys], dtype=torch.float64)
    expected = torch.tensor([exact[key] for key in keys], dtype=torch.float64) * len(drawn)
    return _chi_square_p_value(observed, expected)


def _against_each_other(first, second):
    """p-value of the chi-square test that both samples come from one distribution."""
    keys = sorted(set(first) | set(second))
    counts = torch.tensor([[first.count(key), second.count(key)] for key in keys], dtype=torch.float64)
    expected = counts.sum(dim=1, keepdim=True) * counts.sum(dim=0, keepdim=True) / counts.sum()
    keep = expected.min(dim=1).values >= 5
    merged = torch.cat([counts[keep], counts[~keep].sum(dim=0, keepdim=True)])
    expected = torch.cat([expected[keep], expected[~keep].sum(dim=0, keepdim=True)])
    if expected[-1].min() == 0:
        merged, expected = merged[:-1], expected[:-1]
    statistic = ((merged - expected) ** 2 / expected).sum()
    degrees = torch.tensor(float(len(expected) - 1), dtype=torch.float64)
    return torch.special.gammaincc(degrees / 2, statistic / 2).item()


_EXACT = {}


def _exact_of(config):
    if config not in _EXACT:
        _EXACT[config] = _exact(config)
    return _EXACT[config]


@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_batched_assisted_sampling_is_exact(config):
    exact = _exact_of(config)
    assert abs(sum(exact.values()) - 1) < 1e-5
    assisted = _draw(config, assistant=True, rows=ROWS, calls=CALLS, seed=100)
    plain = _draw(config, assistant=False, rows=ROWS, calls=CALLS, seed=200)
    assert _against_exact(plain, exact) > MIN_P_VALUE, "plain sampling itself does not match the exact distribution"
    p_value = _against_exact(assisted, exact)
    assert p_value > MIN_P_VALUE, f"assisted sampling does not follow the model's distribution (p = {p_value:.2e})"
    p_value = _against_each_other(assisted, plain)
    assert p_value > MIN_P_VALUE, f"assisted and plain sampling differ (p = {p_value:.2e})"


def test_one_prompt_at_a_time_is_exact():
    config = "temperature-top-k"
    drawn = _draw(config, assistant=True, rows=1, calls=SINGLE_CALLS, seed=300)
    p_value = _against_exact(drawn, _exact_of(config))
    assert (
        p_value > MIN_P_VALUE
    ), f"assisted sampling of one row does not follow the model's distribution (p = {p_value:.2e})"


# ---- the check can fail: samplers written here, with the right rule and two wrong ones ------------------------------


def _reference_sampler(config, rule, count, seed, num_candidates=2):
    """`count` continuations drawn by speculative sampling from exact per-prefix distributions, with `rule`:
    "right", "unprocessed-q" (the acceptance ratio with the assistant's distribution before the logits processors and
    warpers) or "resample-p" (a rejected candidate replaced with a sample of `p` instead of the residual)."""
    target, draft = _pair(CONFIGS[config][1])
    p, q, raw_q = {}, {}, {}
    for length in range(NEW_TOKENS):
        prefixes = [PROMPT + list(prefix) for prefix in itertools.product(range(VOCAB), repeat=length)]
        keys = [tuple(prefix) for prefix in prefixes]
        p.update(zip(keys, _next_distributions(target, prefixes, config), strict=True))
        q.update(zip(keys, _next_distributions(draft, prefixes, config), strict=True))
        with torch.no_grad():
            raw_q.update(zip(keys, draft(torch.tensor(prefixes)).logits[:, -1].softmax(dim=-1), strict=True))
    generator = torch.Generator().manual_seed(seed)

    def draw(distribution):
        return torch.multinomial(distribution, 1, generator=generator).item()

    drawn = []
    for _ in range(count):
        sequence = list(PROMPT)
        while len(sequence) < len(PROMPT) + NEW_TOKENS:
            room = len(PROMPT) + NEW_TOKENS - len(sequence) - 1
            candidates, prefix = [], list(sequence)
            for _ in range(min(num_candidates, room)):
                candidates.append(draw(q[tuple(prefix)]))
                prefix.append(candidates[-1])
            for candidate in candidates:
                key = tuple(sequence)
                target_p, draft_q = p[key], q[key]
                ratio_q = raw_q[key] if rule == "unprocessed-q" else draft_q
                if torch.rand(1, generator=generator).item() * ratio_q[candidate] < target_p[candidate]:
                    sequence.append(candidate)
                    continue
                residual = target_p if rule == "resample-p" else (target_p - draft_q).clamp(min=0)
                sequence.append(draw(residual if residual.sum() > 0 else target_p))
                break
            else:
                sequence.append(draw(p[tuple(sequence)]))
        drawn.append(tuple(sequence[len(PROMPT) :]))
    return drawn


@pytest.mark.parametrize("rule", ["right", "unprocessed-q", "resample-p"])
def test_the_check_tells_a_wrong_rule(rule):
    config = "temperature-top-k"
    drawn = _reference_sampler(config, rule, count=ROWS * CALLS, seed=400)
    p_value = _against_exact(drawn, _exact_of(config))
    if rule == "right":
        assert p_value > MIN_P_VALUE, f"the right rule fails the check (p = {p_value:.2e})"
    else:
        assert p_value < MIN_P_VALUE, f"the check does not tell the wrong rule {rule!r} (p = {p_value:.2e})"


# ---- what speculative sampling is for -------------------------------------------------------------------------------


def test_the_model_as_its_own_assistant_keeps_every_candidate():
    """With `q = p` every candidate is kept: under the heuristic schedule the draft grows by 2 every round."""
    target = _model(0, 2, 1.0, vocab=50)  # a flat, high-entropy distribution: sampled tokens rarely repeat a guess
    assistant = copy.deepcopy(target)
    assistant.generation_config.num_assistant_tokens_schedule = "heuristic"
    assistant.generation_config.num_assistant_tokens = 5
    forwards = []
    handle = target.register_forward_pre_hook(lambda module, args: forwards.append(1))
    try:
        with torch.no_grad():
            torch.manual_seed(0)
            out = target.generate(
                torch.tensor([PROMPT]),
                do_sample=True,
                top_k=0,
                max_new_tokens=40,
                pad_token_id=PAD,
                eos_token_id=None,
                assistant_model=assistant,
            )
    finally:
        handle.remove()
    new_tokens = out.shape[1] - len(PROMPT)
    assert new_tokens == 40
    # rounds of 5, 7, 9, 11 candidates plus the model's token: 6 + 8 + 10 + 12 = 36, then the last 4
    assert len(forwards) <= 5 and new_tokens / len(forwards) >= 4, f"{len(forwards)} forward passes for 40 tokens"
