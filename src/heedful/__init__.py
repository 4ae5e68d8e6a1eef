"""heedful: attention seq2seq models; train them, translate with them, see where they look."""

__version__ = "0.1.0"
