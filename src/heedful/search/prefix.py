"""Prefix-constrained decoding: outputs that start with given target tokens.

A prefix is forced one step at a time: at step t < len(prefix) every token but prefix[t] gets
log-probability -inf, so any search (greedy, sampling, beam) takes it, with the model's own
log-probability counted in the score, and then continues freely. This is how interactive
translation completes a user's beginning (Knowles and Koehn 2016; OpenNMT-py's and fairseq's
`--prefix`). The forced steps run through the model like any other, so replaying the output
shows their attention too.

Shapes: B sentences, R decode rows, P the longest prefix, V target vocabulary.
"""

from __future__ import annotations

import unicodedata

import torch

from heedful.data.tokenizers import UNK_ID


class PrefixError(ValueError):
    """A prefix that no output could start with as typed: characters the target vocabulary
    lacks, a target token, or text its tokenizer writes otherwise (it normalises)."""


def _named(char: str) -> str:
    """'é' (U+00E9 LATIN SMALL LETTER E WITH ACUTE); U+202E RIGHT-TO-LEFT OVERRIDE: a
    character without a glyph of its own (a control, a format or a combining mark) by its
    code point only, so that the message shows what it is and stays one line."""
    name = f"U+{ord(char):04X} {unicodedata.name(char, '')}".strip()
    visible = char.isprintable() and not unicodedata.category(char).startswith(("M", "Z"))
    return f"{char!r} ({name})" if visible else name


def prefix_ids(tokenizer, text: str, where: str = "the prefix") -> list[int]:
    """The target ids of a forced beginning, which must spell `text` exactly: the promise is
    that every output starts with its prefix, and a piece forced as <unk> (which decode leaves
    out), a target token (<2de>, which only --target / `target` sets) or a normalised
    spelling would break it silently. Anything else is a PrefixError naming `where` and the
    characters, refused before any search (as OpenNMT and fairseq do not: they force <unk>)."""
    ids = tokenizer.encode(text)
    if UNK_ID in ids:
        lacking = [c for c in dict.fromkeys(text) if UNK_ID in tokenizer.encode(c)]
        shown = ", ".join(map(_named, lacking[:3])) + (" and more" if len(lacking) > 3 else "")
        raise PrefixError(
            f"{where} holds {shown or 'text'}, which the target vocabulary lacks: no output "
            "could start with it; leave it out"
        )
    symbols = getattr(tokenizer, "symbols", ())
    if ids and tokenizer.id_to_token(ids[0]) in symbols:
        raise PrefixError(
            f"{where} starts with {tokenizer.id_to_token(ids[0])}, a target token: the output "
            "language is set by --target (the target field), not by text"
        )
    written = tokenizer.decode(ids)
    if written != text:
        raise PrefixError(
            f"{where} is written {written[:40]!r} by the target tokenizer (it normalises "
            "text), so no output could start with it as typed: send it as written"
        )
    return ids


def prefix_tensor(
    prefix: list[list[int]] | None, device, limits: torch.Tensor | None = None
) -> torch.Tensor | None:
    """Forced output beginnings, one list of ids per sentence -> (B, P), -1 after each one's end
    (None when no sentence has one); checked against the output limits (B,) when given."""
    if prefix is None or not any(prefix):
        return None
    out = torch.full((len(prefix), max(map(len, prefix))), -1, dtype=torch.long, device=device)
    for b, ids in enumerate(prefix):
        out[b, : len(ids)] = torch.tensor(ids, dtype=torch.long)
    if limits is not None:
        check_prefix(out, limits)
    return out


def check_prefix(prefix: torch.Tensor | None, limits: torch.Tensor) -> None:
    """A prefix must fit within its sentence's output limit (B,): ValueError naming both."""
    if prefix is None:
        return
    lengths = (prefix >= 0).sum(1)  # (B,)
    over = (lengths > limits).nonzero()
    if over.numel():
        b = int(over[0, 0])
        raise ValueError(
            f"the prefix of sentence {b + 1} has {int(lengths[b])} tokens, more than its output "
            f"limit of {int(limits[b])} (max_len_ratio · source length + max_len_offset); "
            "shorten it or raise max_len_offset"
        )


def force(
    log_probs: torch.Tensor,
    prefix: torch.Tensor | None,
    step: int,
    sentences: torch.Tensor | None = None,
    k: int = 1,
) -> torch.Tensor:
    """log_probs (R, V) with every token but the forced one at -inf, in rows whose prefix
    reaches `step`; the forced token keeps the model's own log-probability. prefix (B, P) is
    one row per decode row, or, given `sentences` (B',), per sentence of which the rows are
    those of beam search: each of the sentences' K beams reads its sentence's prefix."""
    if prefix is None or step >= prefix.size(1):
        return log_probs
    if sentences is not None:
        prefix = prefix[sentences].repeat_interleave(k, 0)  # (B'·K, P)
    wanted = prefix[:, step].unsqueeze(1)  # (R, 1), -1 where the prefix has ended
    vocab = torch.arange(log_probs.size(-1), device=log_probs.device)  # (V,)
    return log_probs.masked_fill((vocab != wanted) & (wanted >= 0), -torch.inf)
