"""The demos' step budgets: how many steps each task and model may train (`heedful demo
--max-steps`'s default), from the steps each was measured to need to reach its target
(benchmarks/demo_steps.py; docs/benchmarks.md, "The demos' step budgets"). Steps, not seconds:
with fixed seeds a busy machine trains the very same model as an idle one, only slower.
"""

from __future__ import annotations

# Steps to the target (every development pair right), seed 1; a model that did not reach it
# under the measurement's cap has the cap
DATES_STEPS = {
    "transformer": 3200,
    "rnn-bahdanau": 600,
    "rnn-luong-dot": 400,
    "rnn-luong-general": 600,
    "rnn-luong-concat": 400,
    "rnn-scaled-general": 400,
    "rnn-luong-local-m": 800,
    "rnn-luong-local-p": 1200,
}
DIALOGUE_STEPS = {
    "transformer": 3600,
    "rnn-bahdanau": 600,
    "rnn-luong-dot": 1000,
    "rnn-luong-general": 1000,
    "rnn-luong-concat": 600,
    "rnn-scaled-general": 400,
    "rnn-luong-local-m": 1800,
    "rnn-luong-local-p": 1200,
}
CAPTION_STEPS = {"cnn-transformer": 1800, "cnn-rnn-bahdanau": 3600, "vit-transformer": 3600}


def budget_rule(measured: dict[str, int], every: int) -> dict[str, int]:
    """Step budgets from the steps each model took to reach its target (benchmarks/
    demo_steps.py, seed 1): half as many again, rounded up to a validation; rnn-none, which
    reaches no target, gets the largest of the attention models' ("what attention buys"
    then compares it with every one of them at no fewer steps than they needed)."""
    budgets = {name: -(-3 * steps // (2 * every)) * every for name, steps in measured.items()}
    attending = [steps for name, steps in budgets.items() if name.startswith("rnn-")]
    return {**budgets, "rnn-none": max(attending)} if attending else budgets
