"""heedful: attention seq2seq models; train them, translate with them, see where they look."""

__version__ = "0.1.0"


def load(model_dir, device="cpu"):
    """A Translator for a model directory: `heedful.load(DIR).translate(["Hi."], num_beams=5)`."""
    from heedful.translator import Translator

    return Translator.load(model_dir, device)
