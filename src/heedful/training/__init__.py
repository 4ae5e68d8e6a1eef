"""`heedful train`: the loop and its state, the run directory, the tasks it trains (text and
captions) over one pipeline, their validation, logs and interrupts."""
