"""`heedful demo`: a generated task learnt in minutes, then where the model looks."""
