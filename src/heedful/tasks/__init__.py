"""Built-in generated tasks, so that the demo and the tests need no download: dates, the
dialogue of the self-attention article, headlines, and scenes to caption."""
