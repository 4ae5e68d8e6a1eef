"""What `heedful explain` prints: sections of text with the model's numbers, and how a
position, a vector or a table of them is written, the same way for every model.

Positions count from 1 and a position's label is the token read there: a source token as the
model saw it (<unk> where it did not know a piece), or for the decoder the token it reads at that
step (<s>, y_1, ...), with the one it predicts in the heading.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from heedful.data.batching import pad
from heedful.data.tokenizers import BOS, EOS, seen_tokens
from heedful.search.decoding import Hypothesis

SHOWN = 8  # rows of vectors (k_j, v_j, h̄_s) listed before "… N more"


@dataclass
class Section:
    title: str
    lines: list[str] = field(default_factory=list)


@dataclass
class Explanation:
    """What explain computed: sections of text, the softmax weights it printed, and the
    output they make: Σ_j weight_j v_j (a Transformer head) or c_t (an RNN), recomputed, next
    to the one the model computed."""

    heading: str
    sections: list[Section]
    weights: torch.Tensor  # (keys,) float64, the attention distribution explained
    keys: list[str]  # labels of the keys (source or decoder-input tokens)
    context: torch.Tensor  # (d,) Σ_j weight_j · v_j, recomputed in float64
    model_context: torch.Tensor  # (d,) the same vector as the model computed it

    def text(self) -> str:
        out = [self.heading, "=" * min(len(self.heading), 100)]
        for s in self.sections:
            out += ["", f"## {s.title}", *s.lines]
        return "\n".join(out) + "\n"


def vec(x: torch.Tensor, n: int = 6) -> str:
    values = ", ".join(f"{v:+.4f}" for v in x.flatten()[:n].tolist())
    more = ", …" if x.numel() > n else ""
    return f"[{values}{more}]"


def at(name: str, tokens: list[str], j: int) -> str:
    """How a position is named everywhere: `k[3] 'c'`, 1-based, with the token read there."""
    return f"{name}[{j + 1}] {tokens[j]!r}"


def rows(labels: list[str], cells: list[str]) -> list[str]:
    width = max((len(label) for label in labels), default=1)
    return [f"  {label:<{width}}  {cell}" for label, cell in zip(labels, cells)]


def first_rows(lines: list[str], total: int, noun: str) -> list[str]:
    """The first SHOWN of `total` lines, and how many were left out."""
    if total <= SHOWN:
        return lines[:total]
    return [*lines[:SHOWN], f"  … {total - SHOWN} more {noun} not shown ({total} in all)"]


@dataclass
class Output:
    """The greedy output explain looks into: src (1, S), the hypothesis, and the labels."""

    src: torch.Tensor
    hypothesis: Hypothesis
    source_tokens: list[str]  # as the model saw them: <unk> where it did not know a piece
    output_tokens: list[str]  # T labels, </s> included when it finished

    @property
    def inputs(self) -> list[str]:
        """What the decoder read at each step: <s> y_1 .. y_{T-1}."""
        return [BOS, *self.output_tokens[:-1]]


def produce(translator, sentence: str) -> Output:
    if not sentence.strip():
        raise ValueError("empty sentence: give some text to explain")
    src = pad([translator.src_tokenizer.encode(sentence)]).to(translator.device)  # (1, S)
    [[hyp]] = translator.search(src, num_beams=1, n_best=1)
    tgt = translator.tgt_tokenizer
    output_tokens = [tgt.id_to_token(i) for i in hyp.tokens] + ([EOS] if hyp.finished else [])
    return Output(src, hyp, seen_tokens(translator.src_tokenizer, sentence), output_tokens)


def replay_capturing(translator, out: Output, modules: dict):
    """Translator.replay with forward hooks on `modules` ({name: module}): each one's (input,
    output) as the model computed them (input None where it was called with keywords only),
    and the model's attention maps. Both explainers, ours and Hugging Face's, read from it."""
    captured: dict[str, tuple[torch.Tensor | None, torch.Tensor]] = {}

    def keep(name):
        return lambda _module, args, output: captured.__setitem__(
            name, (args[0] if args else None, output)
        )

    hooks = [module.register_forward_hook(keep(name)) for name, module in modules.items()]
    try:
        maps = translator.replay(out.src, out.hypothesis).attention
    finally:
        for hook in hooks:
            hook.remove()
    return captured, maps
