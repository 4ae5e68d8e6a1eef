"""Model directories on disk: config.json, model.safetensors, the source and target sides and
generation.json, written atomically and read strictly; their weights; averaging."""
