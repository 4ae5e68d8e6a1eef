"""How different are the n-best alternatives of beam search and of diverse beam search
(search/diverse.py, Vijayakumar et al. 2018)? Measured on a demo model's held-out inputs.

    heedful demo                                              # the dates model, ~150 s
    python benchmarks/diverse_alternatives.py heedful-demo/model-transformer --task dates
    heedful demo --task dialogue                              # the chatbot, ~150 s
    python benchmarks/diverse_alternatives.py heedful-demo/model-rnn-bahdanau --task dialogue

For each of the first --sentences held-out sources of the demo's task (its seed 1), the
--n-best outputs of beam search (a beam of n) and of diverse beam search (a beam of n in n
groups, one beam each) at each --penalties λ: how many distinct first tokens and how many
distinct outputs they hold, on average, and how often the best output is the reference.
Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import statistics
import time


def held_out(task: str, count: int) -> list[tuple[str, str]]:
    """The demo's held-out pairs (heedful demo --seed 1), the first `count`."""
    if task == "dates":
        from heedful.tasks.dates import dates_task

        return dates_task(0, count, seed=1).test
    from heedful.tasks.dialogue import dialogue_task

    return dialogue_task(1, count, seed=1).test


def measure(translator, pairs, n: int, groups: int, penalty: float) -> dict:
    """Distinct first tokens and outputs among the n-best, and the best output's exact match."""
    sources = [s for s, _ in pairs]
    start = time.perf_counter()
    found = translator.translate(
        sources, num_beams=n, n_best=n, num_beam_groups=groups, diversity_penalty=penalty
    )
    seconds = time.perf_counter() - start
    outputs = [[t, *(t.alternatives or [])] for t in found]
    return {
        "first tokens": statistics.mean(len({tuple(o.tokens[:1]) for o in n_best})
                                        for n_best in outputs),
        "outputs": statistics.mean(len({o.text for o in n_best}) for n_best in outputs),
        "best right": sum(t.text == ref for t, (_, ref) in zip(found, pairs)) / len(pairs),
        "seconds": seconds,
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model_dir")
    parser.add_argument("--task", choices=["dates", "dialogue"], default="dates")
    parser.add_argument("--sentences", type=int, default=200)
    parser.add_argument("--n-best", type=int, default=5)
    parser.add_argument("--penalties", default="0.5,1,2,5")
    args = parser.parse_args()

    import torch

    from heedful.inference.translator import Translator

    torch.set_num_threads(2)
    translator = Translator.load(args.model_dir)
    pairs, n = held_out(args.task, args.sentences), args.n_best
    rows = [("beam search", measure(translator, pairs, n, 1, 0.0))]
    for penalty in [float(p) for p in args.penalties.split(",")]:
        rows.append((f"diverse, λ = {penalty:g}", measure(translator, pairs, n, n, penalty)))
    print(f"{args.task}: {len(pairs)} held-out sources, {n}-best, beam {n}")
    print(f"\n| search | distinct first tokens of {n} | distinct outputs of {n} | best right |")
    print("|---|---:|---:|---:|")
    for name, r in rows:
        print(f"| {name} | {r['first tokens']:.2f} | {r['outputs']:.2f} | {r['best right']:.1%} |")


if __name__ == "__main__":
    main()
