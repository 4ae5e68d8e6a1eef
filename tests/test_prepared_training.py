"""Training from a prepared directory: the same run as in memory, resumable bit for bit, split
across processes and "nodes" (torchrun over localhost), restarted after a node is killed."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from ports import free_port
from test_experiment import corpus, heedful, run_ok, weights, write_config

from heedful.data.batching import InMemoryPairs, epoch_plan
from heedful.data.stream import BatchStream, _rows
from heedful.training.distributed import elastic_store_warning


def prepared_config(tmp_path: Path, steps: int, name: str = "p.yaml", extra: str = "") -> Path:
    data = corpus(tmp_path) if not (tmp_path / "data").exists() else tmp_path / "data"
    plain = write_config(tmp_path, data, steps=steps, name="plain-" + name)
    text = plain.read_text().replace(
        "  valid_max_sentences: 16\n", f"  valid_max_sentences: 16\n  prepared: {tmp_path}/prep\n"
    )
    path = tmp_path / name
    path.write_text(text + extra)
    return path


def train(config: Path, run_dir: Path, *args: str) -> str:
    return run_ok("train", str(config), "--run-dir", str(run_dir), "--no-progress", *args)


def test_training_from_a_prepared_directory_equals_training_in_memory(tmp_path):
    config = prepared_config(tmp_path, steps=8)
    train(tmp_path / "plain-p.yaml", tmp_path / "memory")
    out = train(config, tmp_path / "prepared")
    assert "prepared data:" in out
    a, b = weights(tmp_path / "memory"), weights(tmp_path / "prepared")
    assert all(a[name].equal(b[name]) for name in a)


def test_resume_from_a_prepared_directory_after_sigkill_is_bitwise(tmp_path):
    config = prepared_config(tmp_path, steps=24)
    run_ok("prepare", str(config), "--no-progress")
    train(config, tmp_path / "straight")
    proc = heedful("train", str(config), "--run-dir", str(tmp_path / "resumed"), "--no-progress")
    deadline = time.time() + 120
    while not (tmp_path / "resumed" / "checkpoints" / "step-00000008").exists():
        assert proc.poll() is None and time.time() < deadline, "training ended before the kill"
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert "resuming from" in train(config, tmp_path / "resumed")
    a, b = weights(tmp_path / "straight"), weights(tmp_path / "resumed")
    assert all(a[name].equal(b[name]) for name in a)


def pairs(n: int = 97) -> InMemoryPairs:
    rng = np.random.default_rng(0)
    src = [list(range(4, 4 + k)) for k in rng.integers(1, 30, n)]
    return InMemoryPairs(src, [s[::-1] + [5] for s in src])


@pytest.mark.parametrize("world_size", [1, 2, 3, 7])
def test_every_pair_is_read_once_per_epoch_across_the_ranks(world_size):
    data = pairs()
    for epoch in (0, 1):
        plan = epoch_plan(data, 120, seed=4, epoch=epoch)
        seen = []
        for k in range(len(plan)):
            parts = [_rows(plan, k, rank, world_size) for rank in range(world_size)]
            seen += [i for rows, weight in parts if weight for i in rows.tolist()]
            assert sorted(i for rows, w in parts if w for i in rows) == sorted(plan.batch(k))
        assert sorted(seen) == list(range(len(data)))
    assert epoch_plan(data, 120, 4, 0).order.tolist() != epoch_plan(data, 120, 4, 1).order.tolist()


def test_dataloader_workers_give_the_same_batches():
    data = pairs()
    inline = BatchStream(data, 120, seed=2, epoch=0, batch=3)
    loaded = BatchStream(data, 120, seed=2, epoch=0, batch=3, workers=2)
    for _ in range(2 * len(inline)):  # across an epoch boundary
        a, b = inline.next(), loaded.next()
        assert all(torch.equal(x, y) for x, y in zip(a.batch, b.batch))
        assert (a.weight, a.global_tokens) == (b.weight, b.global_tokens)


def torchrun(*args: str, log: Path, **env: str) -> subprocess.Popen:
    command = [sys.executable, "-m", "torch.distributed.run", *args]
    # faulthandler: a worker that dies by a signal prints each thread's Python stack
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "PYTHONUNBUFFERED": "1",
        "PYTHONFAULTHANDLER": "1",
        **env,
    }
    return subprocess.Popen(  # a session of its own: ended with its workers (stop_all)
        command, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True
    )


def stop_all(nodes: list[subprocess.Popen]) -> None:
    """Kill what is left of each node, its training process too (the test failed or is done):
    torchrun starts its workers in sessions of their own, so they are found as its children."""
    for node in nodes:
        workers = subprocess.run(["pgrep", "-P", str(node.pid)], capture_output=True, text=True)
        for pid in [node.pid, *map(int, workers.stdout.split())]:
            try:
                os.killpg(os.getpgid(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass
        node.wait()


def wait_all(nodes: list[subprocess.Popen], timeout: float, logs: list[Path]) -> list[int]:
    """Every node's exit code once all have ended. A node that fails ends the wait at once
    (the others would wait for it until torchrun's own timeout, 10 minutes), and a failure or a
    wait past `timeout` shows each node's log: the only account of a rendezvous that hung."""
    deadline = time.time() + timeout
    while None in (codes := [node.poll() for node in nodes]):
        failed = any(code not in (None, 0) for code in codes)
        if failed or time.time() > deadline:
            told = "\n".join(f"--- {log.name}\n{log.read_text()}" for log in logs)
            state = f"exit codes {codes}" if failed else f"still running after {timeout} s"
            raise AssertionError(f"torchrun nodes: {state}\n{told}")
        time.sleep(0.05)
    return codes


def two_nodes(config: Path, run_dir: Path, launch: list[str], tmp_path: Path):
    """One torchrun per "node", one process each, meeting on 127.0.0.1."""
    train = ["-m", "heedful", "train", str(config), "--run-dir", str(run_dir), "--no-progress"]
    return [
        torchrun("--nnodes=2", "--nproc-per-node=1", *launch(rank), *train,
                 log=tmp_path / f"node{rank}.log")
        for rank in (0, 1)
    ]  # fmt: skip


def test_two_nodes_over_localhost_train_like_one_process(tmp_path):
    config = prepared_config(tmp_path, steps=8, extra="  rank_logs: true\n")
    one = train(config, tmp_path / "one")
    port = free_port()
    static = lambda rank: [  # noqa: E731
        f"--node-rank={rank}", "--master-addr=127.0.0.1", f"--master-port={port}"]  # fmt: skip
    nodes = two_nodes(config, tmp_path / "two", static, tmp_path)
    files = [tmp_path / f"node{rank}.log" for rank in (0, 1)]
    try:
        codes = wait_all(nodes, 300, files)
    finally:
        stop_all(nodes)
    logs = [file.read_text() for file in files]
    assert codes == [0, 0], "".join(logs)
    a, b = weights(tmp_path / "one"), weights(tmp_path / "two")
    for name in a:
        assert (a[name] - b[name]).abs().max() < 1e-5, name
    # one voice: rank 1 prints nothing of its own and logs to its file, as asked
    said = logs
    assert said[0].count("model: transformer") == 1 and "best checkpoint" in said[0]
    assert "model:" not in said[1] and "best checkpoint" not in said[1]
    assert "best checkpoint" in (tmp_path / "two" / "rank-1.log").read_text()
    best = (tmp_path / "two" / "best").resolve().name
    assert best == (tmp_path / "one" / "best").resolve().name and best in said[0] and best in one


LEAVE = """
import os, torch
from heedful.training.distributed import Distributed

def threads():
    return " ".join(open(f"/proc/self/task/{t}/comm").read().strip()
                    for t in os.listdir("/proc/self/task"))

dist = Distributed.from_env()
dist.start()
net = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(2, 2))  # as train() wraps
del net  # train() has returned
print("@in the group:", threads())
dist.finish()
print("@after finish:", threads())
"""


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="threads are listed by /proc")
def test_finish_ends_the_groups_threads_after_ddp():
    """`finish` must end gloo's threads, not leave them to the interpreter's teardown, where
    they once aborted rank 1 of the two-node test after its training went well (SIGABRT).
    DDP used to keep the group alive past destroy_process_group (Distributed.start says how)."""
    port = free_port()
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", LEAVE],
            env=group_env(port, rank),
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        for rank in (0, 1)
    ]
    try:
        said = [proc.communicate(timeout=120)[0] for proc in procs]
    finally:
        for proc in procs:
            proc.kill()
    for proc, out in zip(procs, said):
        assert proc.returncode == 0, out
        threads = dict(line.split(": ", 1) for line in out.splitlines() if line.startswith("@"))
        assert "gloo" in threads["@in the group"], out  # the check sees them while they live
        after = threads["@after finish"]
        assert "gloo" not in after and "tcpstore" not in after, out  # and none after


def group_env(port: int, rank: int) -> dict[str, str]:
    """What torchrun would give one of two processes (init_process_group's env:// reads it)."""
    group = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": str(rank)}
    return {**os.environ, **group, "WORLD_SIZE": "2", "OMP_NUM_THREADS": "1"}


def test_a_killed_node_is_restarted_and_resumes_from_the_last_checkpoint(tmp_path):
    """torchrun --max-restarts: node 1's training process is killed; both nodes start again
    (a new rendezvous round) and resume from `latest`. TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1, as
    the README says: with the store torchrun shares across rounds, the restarted processes
    could read each other's addresses from the round before and hang (pytorch#135712)."""
    config = prepared_config(tmp_path, steps=60)
    run_ok("prepare", str(config), "--no-progress")
    train(config, tmp_path / "one")
    port = free_port()
    elastic = ["--max-restarts=3", "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}",
               "--rdzv-id=heedful-test"]  # fmt: skip
    train_args = ["-m", "heedful", "train", str(config), "--run-dir", str(tmp_path / "two"),
                  "--no-progress"]  # fmt: skip
    node = lambda rank: torchrun("--nnodes=2", "--nproc-per-node=1", *elastic, *train_args,  # noqa: E731
                                 log=tmp_path / f"node{rank}.log",
                                 TORCH_DISABLE_SHARE_RDZV_TCP_STORE="1")  # fmt: skip
    nodes = [node(0)]
    try:
        wait_for_port(port)  # node 0 holds the rendezvous store, as the first machine would
        nodes.append(node(1))
        deadline = time.time() + 200
        while not (tmp_path / "two" / "checkpoints" / "step-00000008").exists():
            assert all(n.poll() is None for n in nodes) and time.time() < deadline
            time.sleep(0.01)
        [worker] = [  # node 1's training process (a child of its torchrun agent)
            int(pid) for pid in subprocess.run(
                ["pgrep", "-P", str(nodes[1].pid)], capture_output=True, text=True
            ).stdout.split()
        ]  # fmt: skip
        os.kill(worker, signal.SIGKILL)
        codes = wait_all(nodes, 240, [tmp_path / f"node{r}.log" for r in (0, 1)])
    finally:
        stop_all(nodes)
    logs = lambda: "".join((tmp_path / f"node{r}.log").read_text() for r in (0, 1))  # noqa: E731
    assert codes == [0, 0], logs()
    assert "resuming from" in logs() and "warning: torchrun" not in logs()
    assert (tmp_path / "two" / "latest").resolve().name == "step-00000060"
    a, b = weights(tmp_path / "one"), weights(tmp_path / "two")
    for name in a:
        assert (a[name] - b[name]).abs().max() < 1e-4, name


@pytest.mark.parametrize(
    ("env", "warns"),
    [
        ({}, False),  # not under torchrun
        ({"TORCHELASTIC_MAX_RESTARTS": "0", "TORCHELASTIC_USE_AGENT_STORE": "True"}, False),
        ({"TORCHELASTIC_MAX_RESTARTS": "3", "TORCHELASTIC_USE_AGENT_STORE": "True"}, True),
        ({"TORCHELASTIC_MAX_RESTARTS": "3", "TORCHELASTIC_USE_AGENT_STORE": "False"}, False),
        (
            {
                "TORCHELASTIC_MAX_RESTARTS": "3",
                "TORCHELASTIC_USE_AGENT_STORE": "True",
                "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1",
            },
            False,
        ),  # fmt: skip
        ({"TORCHELASTIC_MAX_RESTARTS": "", "TORCHELASTIC_USE_AGENT_STORE": "True"}, False),
    ],
)
def test_restarts_over_a_shared_store_are_warned_about(env, warns):
    warning = elastic_store_warning(env)
    assert (warning is not None) == warns
    assert warning is None or "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1" in warning


def wait_for_port(port: int, seconds: float = 60) -> None:
    deadline = time.time() + seconds
    while time.time() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise AssertionError(f"nothing listens on port {port}")
