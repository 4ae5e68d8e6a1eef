"""The parts the models are built from: attention (masks, scaled dot-product, multi-head, the
RNN decoder's scores and their table), positional encodings, stacked and packed products, and
dropout."""
