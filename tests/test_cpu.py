"""heedful.cpu: threads, OpenMP waiting, and where int8 is fast and exact."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings

import pytest
import torch
from click.testing import CliRunner

from heedful.cli import main
from heedful.cpu import (
    SPIN_COUNT,
    FreeCores,
    Int8Fallback,
    Int8Support,
    bf16_missing,
    core_ticks,
    ctranslate2_compute_type,
    default_threads,
    int8_support,
    set_threads,
    threads_for,
)

AVX2 = {"sse4_2", "avx", "avx2", "fma"}
AVX512 = AVX2 | {"avx512f", "avx512bw", "avx512vl"}


@pytest.mark.parametrize(
    "flags, environ, fast, words",
    [
        (AVX2, {}, False, "no AVX-512 VNNI or AVX-VNNI"),
        (AVX512, {}, False, "no AVX-512 VNNI or AVX-VNNI"),  # AVX-512 alone: no VNNI
        (AVX512 | {"avx512_vnni"}, {}, True, "AVX-512 VNNI"),
        (AVX2 | {"avx_vnni"}, {}, True, "AVX-VNNI"),
        (AVX512 | {"avx512_vnni"}, {"CT2_FORCE_CPU_ISA": "AVX2"}, False, "CT2_FORCE_CPU_ISA=AVX2"),
        (AVX512 | {"avx512_vnni"}, {"MKL_ENABLE_INSTRUCTIONS": "avx2"}, False, "hides"),
        (AVX512 | {"avx512_vnni"}, {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_VNNI"}, True, "VNNI"),
        ({"asimd", "asimddp"}, {}, True, "asimddp"),
        (set(), {}, False, "no"),
    ],
)
def test_int8_is_fast_only_with_vnni_and_not_hidden(flags, environ, fast, words):
    support = int8_support(flags, environ)
    assert support.fast is fast
    assert words in support.reason


@pytest.mark.parametrize(
    "machine, flags, slow",
    [
        ("x86_64", AVX2, True),  # an AVX2-only EPYC: emulated bfloat16
        ("x86_64", AVX512, True),  # AVX-512 alone has no bfloat16 instructions
        ("x86_64", AVX512 | {"avx512_bf16"}, False),
        ("x86_64", AVX512 | {"avx512_bf16", "amx_bf16", "amx_tile"}, False),
        ("x86_64", set(), False),  # flags unknown: not judged
        ("aarch64", {"asimd"}, False),  # not x86: not judged
    ],
)
def test_bf16_is_called_slow_only_on_an_x86_cpu_without_bf16_units(
    monkeypatch, machine, flags, slow
):
    import platform

    monkeypatch.setattr(platform, "machine", lambda: machine)
    said = bf16_missing(flags)
    assert (said is not None) is slow
    if slow:
        assert "no bfloat16 units" in said and "train.bf16=false" in said


def test_ctranslate2_compute_types_by_cpu():
    fast, slow = Int8Support(True, "has it"), Int8Support(False, "this CPU has no AVX-VNNI")
    assert ctranslate2_compute_type(None, fast) == "default"  # as the export was saved
    assert ctranslate2_compute_type("int8", fast) == "int8_float32"
    assert ctranslate2_compute_type(None, slow) == "float32"
    with pytest.warns(Int8Fallback, match="this CPU has no AVX-VNNI.*computing in float32"):
        assert ctranslate2_compute_type("int8", slow) == "float32"


def test_threads_default_and_torchrun_share(monkeypatch):
    cores = len(os.sched_getaffinity(0))
    assert default_threads({}) == cores
    assert default_threads({"LOCAL_WORLD_SIZE": str(cores)}) == 1
    assert default_threads({"LOCAL_WORLD_SIZE": str(cores * 4)}) == 1  # never zero
    before = torch.get_num_threads()
    try:
        assert set_threads(3) == 3 and torch.get_num_threads() == 3
        monkeypatch.setenv("OMP_NUM_THREADS", "2")
        assert set_threads(None) == 3  # the environment's (here: what torch already uses)
        monkeypatch.delenv("OMP_NUM_THREADS")
        assert set_threads(None) == cores
        with pytest.raises(ValueError, match="at least 1"):
            set_threads(0)
    finally:
        torch.set_num_threads(before)


def test_importing_heedful_asks_for_brief_spinning_unless_told_otherwise():
    code = "import os, heedful; print(os.environ.get('GOMP_SPINCOUNT'))"
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}

    def spin_count(**chosen) -> str:
        run = subprocess.run(
            [sys.executable, "-c", code], env={**env, **chosen}, capture_output=True, text=True
        )
        assert run.returncode == 0, run.stderr
        return run.stdout.strip()

    assert spin_count() == str(SPIN_COUNT)
    assert spin_count(GOMP_SPINCOUNT="50") == "50"  # the user's choice stands
    assert spin_count(OMP_WAIT_POLICY="ACTIVE") == "None"  # so does their wait policy


def test_threads_flag_reaches_torch_and_rejects_nonsense(reverse_model_dir):
    before = torch.get_num_threads()
    try:
        result = CliRunner().invoke(
            main, ["translate", str(reverse_model_dir), "--threads", "2"], input="abc\n"
        )
        assert result.exit_code == 0, result.output
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
    for bad in ("0", "-1", "two"):
        result = CliRunner().invoke(main, ["translate", str(reverse_model_dir), "--threads", bad])
        assert result.exit_code == 2 and "--threads" in result.output, result.output


def test_the_command_says_when_int8_falls_back(reverse_model_dir, monkeypatch):
    monkeypatch.setattr(
        "heedful.cpu.int8_support", lambda: Int8Support(False, "this CPU has no AVX-VNNI")
    )
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        result = CliRunner().invoke(
            main,
            ["translate", str(reverse_model_dir), "--engine", "ctranslate2", "--quantize", "int8"],
            input="abc\n",
        )
    assert result.exit_code == 0, result.output
    assert "warning: --quantize int8: this CPU has no AVX-VNNI" in result.output
    assert result.output.splitlines()[-1] == "cba"


# ---- FreeCores: training's threads follow the cores other processes leave free ---------------


@pytest.mark.parametrize(
    ("cores", "others", "threads"),
    [(2, 0.0, 2), (2, 0.35, 2), (2, 0.45, 1), (2, 0.67, 1), (2, 1.0, 1), (2, 3.0, 1),
     (4, 1.0, 3), (4, 0.5, 3), (4, 0.2, 4), (8, 2.7, 5), (1, 0.0, 1)],
)  # fmt: skip
def test_a_core_counts_as_free_when_most_of_it_is(cores, others, threads):
    assert threads_for(cores, others) == threads


def test_core_ticks_reads_our_cores_and_our_own_time(tmp_path):
    """Only the cores we may run on; busy = all but idle and iowait; our own time is utime +
    stime, found after the last ')' (a process name may hold one)."""
    (tmp_path / "self").mkdir()
    (tmp_path / "stat").write_text(
        "cpu  99 99 99 99 99 99 99 99 0 0\n"
        "cpu0 10 1 5 100 4 1 1 2 7 0\n"  # busy 10+1+5+1+1+2 = 20 of 124
        "cpu1 1000 0 0 0 0 0 0 0 0 0\n"  # not ours
        "cpu2 30 0 10 50 0 0 0 0 0 0\n"  # busy 40 of 90
        "intr 12345\n",
        encoding="ascii",
    )
    fields = ["S"] + ["0"] * 10 + ["17", "5"] + ["0"] * 30  # state, ..., utime, stime, ...
    (tmp_path / "self" / "stat").write_text("42 (odd) name) " + " ".join(fields), "ascii")
    assert core_ticks([0, 2], tmp_path) == (60, 214, 22)


class Ticks:
    """Counters that another process (and ours) moves as a test says."""

    def __init__(self):
        self.now, self.busy, self.total, self.own = 0.0, 0, 0, 0

    def advance(self, seconds: float, others: float, ours: float, cores: int = 2):
        ticks = int(seconds * 100)
        self.now += seconds
        self.busy += int(ticks * (others + ours))
        self.total += ticks * cores
        self.own += int(ticks * ours)


def test_the_threads_follow_a_busy_process_down_and_back_up():
    """Two threads while the cores are ours; one while another process keeps a core busy;
    two again once it stops; and no look before EVERY seconds have passed."""
    saved = torch.get_num_threads()
    ticks = Ticks()
    try:
        torch.set_num_threads(2)
        cores = FreeCores([0, 1], read=lambda: (ticks.busy, ticks.total, ticks.own),
                          clock=lambda: ticks.now)  # fmt: skip
        ticks.advance(FreeCores.EVERY, others=0.05, ours=1.9)
        assert cores.look() is None and torch.get_num_threads() == 2
        ticks.advance(FreeCores.EVERY, others=0.7, ours=1.3)  # a rival takes its share
        threads, others = cores.look()
        assert threads == 1 == torch.get_num_threads() and others == pytest.approx(0.7)
        ticks.advance(FreeCores.EVERY / 2, others=0.0, ours=1.0)
        assert cores.look() is None and torch.get_num_threads() == 1  # too soon to look
        ticks.advance(FreeCores.EVERY, others=1.0, ours=1.0)  # the rival still runs
        assert cores.look() is None and torch.get_num_threads() == 1
        ticks.advance(FreeCores.EVERY, others=0.02, ours=1.0)  # it stopped
        assert cores.look()[0] == 2 == torch.get_num_threads()
    finally:
        torch.set_num_threads(saved)


def test_threads_follow_the_cores_only_when_left_to_heedful(monkeypatch):
    """A pinned count (train.threads, --threads, OMP_NUM_THREADS) and torchrun's processes
    keep theirs: the count changes the weights' last bits, and a pin is how a user asks for
    a model that does not depend on what else runs."""
    monkeypatch.setattr("heedful.cpu._chosen", False)
    assert FreeCores.follow(2, environ={}) is None
    assert FreeCores.follow(None, environ={"OMP_NUM_THREADS": "2"}) is None
    assert FreeCores.follow(None, environ={"LOCAL_WORLD_SIZE": "2"}) is None
    if len(os.sched_getaffinity(0)) > 1:
        assert isinstance(FreeCores.follow(None, environ={}), FreeCores)
        saved = torch.get_num_threads()
        try:
            set_threads(saved)  # a count given to set_threads (--threads) is the user's
        finally:
            torch.set_num_threads(saved)
        assert FreeCores.follow(None, environ={}) is None


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores to share")
def test_a_real_busy_process_is_seen_as_a_core_taken():
    """A single-threaded busy loop beside us, measured from the real /proc counters: about one
    core taken by others, so one thread fewer."""
    cores = sorted(os.sched_getaffinity(0))
    watcher = FreeCores(cores)
    rival = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        watcher.last = (watcher.clock(), *watcher.read())  # from when the rival runs
        saved = torch.get_num_threads()
        torch.set_num_threads(len(cores))
        try:
            import time

            time.sleep(FreeCores.EVERY + 0.5)
            changed = watcher.look()
            assert changed is not None, "the busy process was not seen"
            threads, others = changed
            assert 0.7 <= others <= len(cores) and threads == threads_for(len(cores), others)
            assert threads < len(cores) and torch.get_num_threads() == threads
        finally:
            torch.set_num_threads(saved)
    finally:
        rival.kill()
        rival.wait()


def test_counters_that_cannot_be_read_keep_the_count():
    """/proc unreadable mid-run (a container's mount changed): training goes on, the count as
    it was."""
    saved, now, reads = torch.get_num_threads(), [0.0], [(0, 0, 0)]

    def read():
        if len(reads) > 1:
            raise PermissionError("/proc/stat")
        return reads[-1]

    cores = FreeCores([0, 1], read=read, clock=lambda: now[0])
    reads.append(None)
    now[0] = 10.0
    assert cores.look() is None and torch.get_num_threads() == saved
