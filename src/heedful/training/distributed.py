"""Which process of a multi-process run this is (torchrun), and what the processes agree on:
the clock, the barrier, joining and leaving the process group. Alone, all of it is a no-op."""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Distributed:
    """This process's place in a multi-process run (torchrun sets RANK / WORLD_SIZE)."""

    rank: int = 0
    world_size: int = 1

    @classmethod
    def from_env(cls) -> Distributed:
        return cls(int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1)))

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def device(self) -> torch.device:
        """This process's device: its GPU (torchrun's LOCAL_RANK) where there are GPUs."""
        if torch.cuda.is_available():
            local = int(os.environ.get("LOCAL_RANK", self.rank))
            return torch.device("cuda", local % torch.cuda.device_count())
        return torch.device("cpu")

    def start(self, echo=print) -> None:
        """Join torchrun's process group (gloo on CPUs, NCCL on GPUs); alone, there is none."""
        if self.world_size == 1 or torch.distributed.is_initialized():
            return
        warning = elastic_store_warning(os.environ)
        if warning and self.is_main:
            echo(warning)
        # torch.distributed.nn.functional's collectives default to `group=group.WORLD`, a
        # value read once, when the module is first imported. DDP imports it (through
        # torch._dynamo) after the group exists, so ten defaults would hold the group: then
        # destroy_process_group cannot free it, gloo's threads outlive `finish`, and the
        # interpreter's teardown can abort under them (SIGABRT, "terminate called without an
        # active exception"). Imported before the group, they hold None.
        importlib.import_module("torch.distributed.nn.functional")
        torch.distributed.init_process_group("nccl" if torch.cuda.is_available() else "gloo")

    def latest(self, seconds: float, device: str | torch.device = "cpu") -> float:
        """The largest of every process's `seconds`. Each reading its own clock, one process
        could stop at train.max_time a step before another, which would then wait in its next
        all-reduce for ever, and the linear schedule would give them different rates. The
        same holds for a signal that reaches one process and not (yet) another: every process
        stops at the step where the first one caught it (see StopSignals)."""
        if self.world_size == 1:
            return seconds
        value = torch.tensor([seconds], dtype=torch.float64, device=device)
        torch.distributed.all_reduce(value, op=torch.distributed.ReduceOp.MAX)
        return float(value.item())

    def barrier(self) -> None:
        """Wait until every process gets here (nothing to wait for alone)."""
        if self.world_size > 1:
            torch.distributed.barrier()

    def finish(self) -> None:
        """Leave torchrun's process group once every process is done: a process that exits
        with the group still open can die in its threads' teardown ("terminate called without
        an active exception", exit -6) after training went well, and torchrun reports a
        failure. The group (and gloo's threads) ends here only if nothing else holds it: see
        `start`. Alone, there is nothing to leave."""
        if self.world_size > 1 and torch.distributed.is_initialized():
            torch.distributed.barrier()
            torch.distributed.destroy_process_group()


def elastic_store_warning(env) -> str | None:
    """What to tell a user whose torchrun restarts workers (--max-restarts) over the store it
    shares with them (torch >= 2.5's default). That store outlives a restart, and the process
    group's keys carry no round number, so a restarted worker can read its peer's address from
    the round before and never connect (pytorch/pytorch#135712; our tests saw 2 hangs in 5).
    TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1, set where torchrun runs, gives each round a new store."""
    restarts = int(env.get("TORCHELASTIC_MAX_RESTARTS") or 0)
    shared = env.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
    if restarts > 0 and shared and env.get("TORCH_DISABLE_SHARE_RDZV_TCP_STORE") != "1":
        return (
            "warning: torchrun --max-restarts with its shared store can hang after a restart "
            "(pytorch/pytorch#135712); run torchrun with TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1"
        )
    return None


ALONE = Distributed()  # a run of one process
