"""The weight names of model directories written before every model became one
EncoderDecoder(encoder, decoder) (issue 27), and today's name of each.

The Transformer was one flat module (src_embed, encoder_layers, encoder_norm, tgt_embed,
decoder_layers, decoder_norm, generator); an image Transformer was that module with no source
embedding and its pixel encoder as image_encoder. The RNN models already held `encoder` and
`decoder` (an image RNN's pixel encoder under `encoder`): their names are today's.

A layout lists its module names in the order the module registered them, which is the order
of its parameters, hence the numbering of a training checkpoint's optimizer state.
"""

from __future__ import annotations

from collections.abc import Iterable

from heedful.io import CheckpointError

TEXT_TRANSFORMER = {  # Transformer: earlier name -> today's
    "src_embed.": "encoder.embed.",
    "tgt_embed.": "decoder.embed.",
    "encoder_layers.": "encoder.layers.",
    "decoder_layers.": "decoder.layers.",
    "encoder_norm.": "encoder.norm.",
    "decoder_norm.": "decoder.norm.",
    "generator.": "decoder.generator.",
}
IMAGE_TRANSFORMER = {  # ImageTransformer: the same without src_embed, its pixel encoder last
    "tgt_embed.": "decoder.embed.",
    "decoder_layers.": "decoder.layers.",
    "decoder_norm.": "decoder.norm.",
    "generator.": "decoder.generator.",
    "image_encoder.": "encoder.",
}


def earlier_layout(names: Iterable[str]) -> dict[str, str] | None:
    """The layout of a weights file's tensor names when they are an earlier one, else None
    (today's names, or an RNN's, which never changed)."""
    names = list(names)
    if any(n.startswith("image_encoder.") for n in names):
        return IMAGE_TRANSFORMER
    if any(n.startswith(tuple(TEXT_TRANSFORMER)) for n in names):
        return TEXT_TRANSFORMER
    return None


def _renamed(name: str, layout: dict[str, str]) -> str:
    for old, new in layout.items():
        if name.startswith(old):
            return new + name.removeprefix(old)
    return name


def current_names(names: Iterable[str], where: object = "weights") -> dict[str, str]:
    """{name in the file: today's name} for every tensor of a weights file. A file that holds
    one tensor under its earlier and its current name is refused, naming both (`where`: the
    file, for the message); names of no layout stay as they are (the model then names them
    as unexpected)."""
    names = list(names)
    layout = earlier_layout(names) or {}
    out, seen = {}, {}
    for name in names:
        current = _renamed(name, layout)
        if current in seen:
            raise CheckpointError(
                f"{where}: holds tensor {current} twice, as {seen[current]} and as {name} "
                "(an earlier heedful's name and today's); keep one of them"
            )
        out[name], seen[current] = current, name
    return out


def earlier_order(names: list[str], file_names: Iterable[str]) -> list[str]:
    """Today's parameter `names` (in today's order) in the order the earlier model whose
    weights file held `file_names` listed its parameters; today's order when the file's names
    are today's."""
    layout = earlier_layout(file_names)
    if layout is None:
        return list(names)
    prefixes = list(layout.values())

    def rank(name: str) -> int:
        found = (i for i, prefix in enumerate(prefixes) if name.startswith(prefix))
        return next(found, len(prefixes))

    return sorted(names, key=rank)  # stable: within a module the order never changed
