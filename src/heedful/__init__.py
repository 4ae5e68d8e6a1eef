"""heedful: attention-based sequence-to-sequence models; train them, translate, see where they look."""

__version__ = "0.1.0"
