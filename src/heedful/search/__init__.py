"""Search, written once against the models' encode / decode_step: greedy, beam, sampling and
forced prefixes, and the one dispatch from SearchSettings to them."""
