"""Files as an earlier heedful wrote them: a config's model and data sections with the flat keys
they had before their parts (issue 27, item 6; config/flat.py reads them)."""

from __future__ import annotations

from heedful.config.flat import DATA_KEYS, MODEL_KEYS


def flat_model(model: dict) -> dict:
    """A nested model section (config.json's `model`, a config's) flattened: each key of
    model.encoder and model.decoder under its flat name (an encoder's layers as cnn_layers for
    a CNN, encoder_layers otherwise)."""
    encoder, decoder = model.get("encoder", {}), model.get("decoder", {})
    kind = encoder.get("kind", "text")
    flat = {k: v for k, v in model.items() if k not in ("encoder", "decoder")}
    for key, (part, leaf) in MODEL_KEYS.items():
        if key == {"cnn": "encoder_layers"}.get(kind, "cnn_layers"):
            continue  # the other kinds' name for model.encoder.layers
        given = encoder if part == "encoder" else decoder
        if leaf in given:
            flat[key] = given[leaf]
    return flat


def flat_data(data: dict) -> dict:
    """A nested data section flattened: data.source's keys under their flat names."""
    source = data.get("source", {})
    flat = {k: v for k, v in data.items() if k != "source"}
    return flat | {key: source[leaf] for key, (_, leaf) in DATA_KEYS.items() if leaf in source}
