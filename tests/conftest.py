import torch

# The tests use tiny tensors: one thread avoids OpenMP start-up and barrier costs that dominate
# at this size (and collapse when another process shares the two cores).
torch.set_num_threads(1)
