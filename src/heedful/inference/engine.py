"""What every engine offers (the Engine protocol), what each can do (its Capabilities), and the
one check of a search against them, for the Python API, the CLI and the server alike.

    torch         Translator (translator.py) on text: every setting, prefixes, attention
                  weights, a trace's internals
    torch         Translator on pictures (an image model): the same, but no internals
    ctranslate2   CTranslate2Translator (runtime.py): greedy and beam search only

Torch-free: the CLI checks its flags against an engine before it loads a model.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any, Protocol

from heedful.config.search import DRAWS, SETTINGS, SearchSettings, flag

# The settings of greedy and beam search: what shapes a search that draws nothing
SEARCH = frozenset({"num_beams", "n_best", "length_penalty", "max_len_ratio", "max_len_offset"})
EVERY_SETTING = frozenset(SETTINGS)


@dataclass(frozen=True)
class Capabilities:
    """What an engine can do: the SearchSettings it honours (one it does not is refused when it
    would change the search: a setting away from its default, the sampling ones with sample
    only), whether it forces prefixes, whether it gives attention weights (need_weights,
    traces), whether a trace can record its internals (visualize/internals.py) and whether
    attention heads can be switched off (inference/heads.py)."""

    settings: frozenset[str] = EVERY_SETTING
    prefixes: bool = True
    attention: bool = True
    internals: bool = True
    masks: bool = True
    instead: str = "the torch engine, not {engine}"  # what can, said when it refuses


# An image model's Translator: pictures go through the same search, prefixes, sampling and
# replay as text, and its traces through the same build_trace; the calculation panels'
# internals are read off a token encoder's layers, which a picture's encoder does not have.
PICTURES = Capabilities(
    internals=False,
    instead="a text model (an image model's trace holds its weights, picture and rollout)",
)


@dataclass(frozen=True)
class Names:
    """How a surface spells what the check may refuse, for its messages."""

    setting: dict  # a SearchSettings field -> its name there (unlisted: the field's own)
    prefix: str
    attention: str
    internals: str = "internals=True"  # only the Python API asks for them
    masks: str = "mask_heads"  # the heads switched off (inference/heads.py)


PYTHON = Names({"sample": "sample=True"}, "prefixes", "need_weights=True")
CLI = Names({n: flag(n) for n in EVERY_SETTING}, "--prefix", "--attention")  # as declared
HTTP = Names({}, "prefix", "return_attention")


class Unsupported(ValueError):
    """A search an engine cannot run as asked; the message names the setting as the caller
    spelled it and the engine that can."""


class Engine(Protocol):
    """What the CLI, the server and notebooks use of a loaded model, whichever engine runs it."""

    engine: str  # its name: torch | ctranslate2
    capabilities: Capabilities
    generation: SearchSettings  # the model's defaults (generation.json)
    source: Any  # data/sources.py: what translate() takes, text or pictures
    tgt_tokenizer: Any

    def translate(
        self,
        texts: Sequence[Any],
        num_beams: int | None = None,
        n_best: int | None = None,
        batch_size: int = 64,
        need_weights: bool = False,
        *,
        settings: SearchSettings | None = None,
        **overrides: Any,
    ) -> list: ...


def active(settings: SearchSettings) -> set[str]:
    """The settings that change this search: the search's own, and the others away from their
    defaults (those that shape the draws only with sample)."""
    default = SearchSettings()
    changed = {
        f.name for f in fields(settings) if getattr(settings, f.name) != getattr(default, f.name)
    }
    return SEARCH | (changed if settings.sample else changed - DRAWS)


def check_supported(
    engine: str,
    capabilities: Capabilities,
    settings: SearchSettings,
    prefixes: bool = False,
    attention: bool = False,
    names: Names = PYTHON,
    internals: bool = False,
    masks: bool = False,
) -> None:
    """Unsupported, naming the setting, for what `engine` cannot do: the one check of it.

    prefixes, attention, internals, masks: whether the call forces prefixes, asks for
    attention weights, for a trace's internals and to switch heads off. names: how the
    caller's surface spells them (PYTHON, CLI, HTTP)."""
    if attention and not capabilities.attention:
        raise Unsupported(
            f"the {engine} engine, which gives no attention weights, was asked for them "
            f"({names.attention}): drop it, or use the torch engine (the default)"
        )
    if masks and not capabilities.masks:
        raise Unsupported(
            f"the {engine} engine cannot switch heads off ({names.masks}): use the torch "
            "engine (the default)"
        )
    if internals and not capabilities.internals:
        raise Unsupported(f"{names.internals} needs {capabilities.instead.format(engine=engine)}")
    refused = sorted(active(settings) - capabilities.settings)
    if refused or (prefixes and not capabilities.prefixes):
        # the decodings it lacks are named together (sample and prefix), whichever was asked
        lacks = [] if "sample" in capabilities.settings else ["sample"]
        lacks += [n for n in refused if n not in lacks and not (lacks and n in DRAWS)]
        words = [names.setting.get(name, name) for name in lacks]
        words += [] if capabilities.prefixes else [names.prefix]
        instead = capabilities.instead.format(engine=engine)
        verb = "needs" if len(words) == 1 else "need"
        raise Unsupported(f"{' and '.join(words)} {verb} {instead}")
