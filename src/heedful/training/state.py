"""What training carries from one step to the next besides the weights, made fresh or resumed.

A `TrainState` is the optimizer (with its parameter groups), the learning-rate schedule and the
progress (step, data position, best score); with the random generators, it is all a resumed run
needs to continue bit for bit. A checkpoint holds it beside the model directory's files:

    training_state.safetensors   optimizer moments; the CPU's and each CUDA device's RNG state
    training_state.json          progress, optimizer hyper-parameters and scalars, schedule

Like model directories, it is safetensors + JSON and never a pickle.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch import nn

from heedful.checkpoint.names import earlier_order
from heedful.checkpoint.weights import weights_header
from heedful.config import TrainConfig
from heedful.io import CheckpointError, atomic_write_json, read_json, readable_as_created


def seed_generators(seed: int) -> None:
    """The one place the seed is set; a model's initialisation and a fresh training state
    both start from it. torch.manual_seed seeds the CPU generator and every CUDA device's;
    the batch order draws from its own random.Random (BatchStream), nothing from numpy."""
    torch.manual_seed(seed)


def learning_rate_factor(step: int, warmup_steps: int, schedule: str, used: float = 0.0) -> float:
    """Multiplier of the peak learning rate at `step` (1-based), `used` of the budget spent.

    Linear warm-up to the peak, then constant, or the inverse square root decay of Vaswani et
    al. 2017, §5.3 ("Noam"), normalised so the peak is exactly `train.lr`, or a straight line
    from the peak down to 0 where the budget ends ("linear"): with a budget of minutes rather
    than epochs, annealing to zero by the end beats a schedule cut off mid-decay (Li et al.
    2020, "Budgeted Training"). The line starts where warm-up ended, at the share of the budget
    warm-up took; steps at an even pace took `used · warmup / step` of it, so no time has to be
    remembered and a resumed run draws the same line.
    """
    if warmup_steps > 0 and step < warmup_steps:
        return step / warmup_steps
    if schedule == "inverse_sqrt":
        return math.sqrt(max(warmup_steps, 1) / step)
    if schedule == "linear":
        if used >= 1.0:
            return 0.0
        at_warmup = used * min(warmup_steps, step) / step
        return (1.0 - used) / (1.0 - at_warmup)  # 1 when warm-up ends, 0 at the budget's end
    return 1.0


def budget_used(step: int, seconds: float, config: TrainConfig) -> float:
    """The share of the training budget spent: of train.max_steps or of train.max_time,
    whichever runs out first (validation counts in the time, as it does for stopping)."""
    used = step / config.max_steps
    if config.max_time is not None:
        used = max(used, seconds / config.max_time)
    return min(used, 1.0)


def parameter_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Matrices decay; biases and LayerNorm gains and biases (vectors) do not.

    Decay regularises by keeping the matrices of the linear maps small; a bias or a norm's gain
    is one shift or scale per channel, which decay would only pull toward 0 (a gain of 0
    silences its channel). The rule is nanoGPT's (configure_optimizers: "all weight tensors in
    matmuls + embeddings decay, all biases and layernorms don't"): embeddings decay too, since
    the target embedding is also the output projection when tied. Without decay, one group of
    every parameter in model order, as before the split, so older checkpoints still resume.
    """
    params = dict(model.named_parameters())
    groups = [[params[name] for name in names] for names in group_names(model, weight_decay)]
    if weight_decay == 0:
        return [{"params": groups[0]}]
    return [
        {"params": groups[0], "weight_decay": weight_decay},
        {"params": groups[1], "weight_decay": 0.0},
    ]


def group_names(model: nn.Module, weight_decay: float, order: list[str] | None = None):
    """The names of parameter_groups' parameters, group by group, listed in `order` (the
    model's by default); a frozen trunk's parameters are in none."""
    params = dict(model.named_parameters())
    names = [name for name in (order or params) if params[name].requires_grad]
    if weight_decay == 0:
        return [names]
    return [
        [name for name in names if params[name].dim() >= 2],
        [name for name in names if params[name].dim() < 2],
    ]


def make_optimizer(model: nn.Module, config: TrainConfig) -> torch.optim.Optimizer:
    # AdamW decays the weights directly (Loshchilov & Hutter 2019); Adam adds the decay to the
    # gradient, where the adaptive step rescales it (plain L2 regularisation).
    kind = torch.optim.AdamW if config.optimizer == "adamw" else torch.optim.Adam
    groups = parameter_groups(model, config.weight_decay)
    # fused: one kernel over all parameters instead of ~10 small operations per tensor; the
    # per-tensor loop was 18% of a Multi30k Transformer step under torch.profiler, fused Adam
    # 4%, and steps ran 1.17x as fast (benchmarks/profile_training.py, 2 shared cores). Float32
    # on the CPU or a GPU only; a resumed run keeps the choice saved with its optimizer state.
    fused = all(
        p.device.type in ("cpu", "cuda") and p.dtype == torch.float32 for p in model.parameters()
    )
    return kind(
        groups, lr=config.lr, betas=config.betas, weight_decay=config.weight_decay, fused=fused
    )


def make_scheduler(optimizer: torch.optim.Optimizer, config: TrainConfig, seconds=lambda: 0.0):
    """`seconds()`: the training time so far, which the linear schedule's budget counts."""

    def factor(i: int) -> float:
        used = budget_used(i + 1, seconds(), config)
        return learning_rate_factor(i + 1, config.warmup_steps, config.schedule, used)

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


@dataclass
class TrainProgress:
    """Where training stands; saved in every checkpoint, restored on resume."""

    step: int = 0
    epoch: int = 0  # data position: epoch number and batch index within it
    batch_in_epoch: int = 0
    tokens: int = 0  # target tokens trained on
    seconds: float = 0.0  # training wall-clock time, summed over resumed sessions
    best_score: float | None = None  # best validation value of the early-stopping metric
    bad_validations: int = 0  # validations since the best one


@dataclass
class TrainState:
    """The optimizer, its schedule and the progress of one run: fresh at step 0, or resumed.
    `parameters`: the name of each parameter the optimizer numbers, in its order."""

    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LambdaLR
    progress: TrainProgress
    parameters: list[str]

    @classmethod
    def fresh(cls, model: nn.Module, config: TrainConfig) -> TrainState:
        """Step 0, with the random generators seeded from train.seed."""
        seed_generators(config.seed)
        return cls._new(model, config, TrainProgress())

    @classmethod
    def resume(cls, directory: Path, model: nn.Module, config: TrainConfig) -> TrainState:
        """The state a checkpoint holds (see `save`), the random generators restored too."""
        state = cls._new(model, config, TrainProgress())
        saved = _saved_parameters(Path(directory), model, config.weight_decay)
        info = read_training_state(
            Path(directory), state.optimizer, state.scheduler, saved, state.parameters
        )
        state.progress = TrainProgress(**info["progress"])
        return state

    @classmethod
    def _new(cls, model: nn.Module, config: TrainConfig, progress: TrainProgress) -> TrainState:
        optimizer = make_optimizer(model, config)
        names = [name for group in group_names(model, config.weight_decay) for name in group]
        state = cls(optimizer, None, progress, names)
        state.scheduler = make_scheduler(optimizer, config, lambda: state.progress.seconds)
        return state

    def save(self, directory: Path, **info) -> None:
        """Write the training state files into `directory` (a checkpoint being staged)."""
        info = {"progress": asdict(self.progress), "optimizer_parameters": self.parameters, **info}
        write_training_state(Path(directory), self.optimizer, self.scheduler, info)


def _saved_parameters(directory: Path, model: nn.Module, weight_decay: float) -> list[str]:
    """The names of the parameters the checkpoint's optimizer state numbers: those it lists,
    or, in a checkpoint written before it listed them, those of the model that wrote it, in
    that model's order (checkpoint/names.py: the earlier weight names say which model)."""
    info = read_json(directory / "training_state.json")
    if isinstance(info, dict) and "optimizer_parameters" in info:
        names = info["optimizer_parameters"]
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise CheckpointError(
                f"{directory / 'training_state.json'}: optimizer_parameters must be the list "
                "of the parameters' names"
            )
        return names
    weights = directory / "model.safetensors"
    written = weights_header(weights) if weights.is_file() else {}
    order = earlier_order(list(dict(model.named_parameters())), written)
    return [name for group in group_names(model, weight_decay, order) for name in group]


# ---------------------------------------------------------------------------------------------
# On disk
# ---------------------------------------------------------------------------------------------


def rng_state() -> dict[str, torch.Tensor]:
    """The CPU generator's state and, once CUDA is in use, each CUDA device's: dropout on a GPU
    draws from the device's generator, so a resume that restored the CPU's alone would not be
    exact there. CUDA is not initialised just to ask (that takes seconds and memory)."""
    tensors = {"rng.torch": torch.get_rng_state()}
    if torch.cuda.is_initialized():
        for device, state in enumerate(torch.cuda.get_rng_state_all()):
            tensors[f"rng.cuda.{device}"] = state
    return tensors


def restore_rng(tensors: dict[str, torch.Tensor]) -> None:
    """Undo what `rng_state` saved; CUDA states wait for a CUDA device (resumed on a CPU, or on
    fewer GPUs, the run goes on, no longer bit for bit)."""
    torch.set_rng_state(tensors["rng.torch"])
    if torch.cuda.is_available():
        for device in range(torch.cuda.device_count()):
            if f"rng.cuda.{device}" in tensors:
                torch.cuda.set_rng_state(tensors[f"rng.cuda.{device}"], device)


def write_training_state(
    directory: Path, optimizer: torch.optim.Optimizer, scheduler, info: dict
) -> None:
    """Optimizer tensors and the RNG states into safetensors; everything else into JSON."""
    from safetensors.torch import save_file

    state = optimizer.state_dict()
    tensors, scalars = rng_state(), {}
    for param_id, param_state in state["state"].items():
        for name, value in param_state.items():
            if torch.is_tensor(value):
                tensors[f"optimizer.{param_id}.{name}"] = value.contiguous()
            else:
                scalars[f"{param_id}.{name}"] = value
    scheduler_state = {k: v for k, v in scheduler.state_dict().items() if k != "lr_lambdas"}
    save_file(tensors, str(directory / "training_state.safetensors"))
    readable_as_created(directory / "training_state.safetensors")
    atomic_write_json(
        directory / "training_state.json",
        {
            **info,
            "optimizer_param_groups": state["param_groups"],
            "optimizer_scalars": scalars,
            "scheduler": scheduler_state,
        },
    )


def read_training_state(
    directory: Path,
    optimizer: torch.optim.Optimizer,
    scheduler,
    saved: list[str] | None = None,
    names: list[str] | None = None,
) -> dict:
    """Restore optimizer, scheduler and RNGs; returns the JSON info (progress, metrics, ...).
    saved, names: the parameter of each number in the checkpoint's optimizer state and in
    `optimizer`, when they may differ (the state is renumbered by name)."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    info = read_json(directory / "training_state.json")
    try:
        tensors = load_file(str(directory / "training_state.safetensors"))
    except (SafetensorError, OSError) as error:
        raise CheckpointError(
            f"{directory}: unreadable training_state.safetensors ({error})"
        ) from None
    _check_groups(directory, info["optimizer_param_groups"], optimizer)
    param_states: dict[int, dict] = {}
    for key, value in tensors.items():
        if key.startswith("optimizer."):
            _, param_id, name = key.split(".", 2)
            param_states.setdefault(int(param_id), {})[name] = value
    for key, value in info["optimizer_scalars"].items():
        param_id, name = key.split(".", 1)
        param_states.setdefault(int(param_id), {})[name] = value
    if saved is not None and names is not None and saved != names:
        param_states = _renumbered(directory, param_states, saved, names)
    optimizer.load_state_dict(
        {"state": param_states, "param_groups": info["optimizer_param_groups"]}
    )
    scheduler.load_state_dict({**scheduler.state_dict(), **info["scheduler"]})
    restore_rng(tensors)
    return info


def _renumbered(directory: Path, states: dict[int, dict], saved: list[str], names: list[str]):
    """The per-parameter states numbered by `names` instead of `saved` (the same parameters
    in another order: a model whose modules were reordered, checkpoint/names.py)."""
    where = {name: i for i, name in enumerate(saved)}
    if sorted(where) != sorted(names):
        unknown = sorted(set(names) ^ set(where))
        raise CheckpointError(
            f"{directory}: its optimizer state is of other parameters than this model's "
            f"({unknown[:3]}); resume with the config it was trained with, or use --force to "
            "start over"
        )
    return {i: states[where[name]] for i, name in enumerate(names) if where[name] in states}


def _check_groups(directory: Path, saved: list[dict], optimizer: torch.optim.Optimizer) -> None:
    """torch's own error ("a parameter group that doesn't match the size") names neither the
    checkpoint nor the setting that splits the groups."""
    have = [len(g["params"]) for g in saved]
    want = [len(g["params"]) for g in optimizer.param_groups]
    if have != want:
        raise CheckpointError(
            f"{directory}: its optimizer state has parameter groups of {have} tensors, but this "
            f"model and config make groups of {want} (train.weight_decay > 0 splits off the "
            "biases and norms); resume with the config it was trained with, or use --force "
            "to start over"
        )
