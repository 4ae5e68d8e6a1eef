"""heedful.cpu: threads, OpenMP waiting, and where int8 is fast and exact."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import warnings

import pytest
import torch
from click.testing import CliRunner

from heedful.cli import main
from heedful.cpu import (
    Int8Fallback,
    Int8Support,
    ctranslate2_compute_type,
    default_threads,
    int8_support,
    reuse_freed_memory,
    set_threads,
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


# A training step's activations: 16 tensors of 1 to 16 MiB (136 MiB), written, then all freed;
# the page faults of ten such steps after three of warm-up.
STEPS_OF_TENSORS = """
import resource, torch
from heedful.cpu import reuse_freed_memory
applied = reuse_freed_memory()
def step():
    kept = [torch.empty(n * 2**18).fill_(1.0) for n in range(1, 17)]
    del kept
for _ in range(3):
    step()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(10):
    step()
print(applied, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def test_freed_memory_is_reused_instead_of_faulted_in_again():
    """After reuse_freed_memory a step's tensors come from the heap, not from fresh pages; with
    a user's allocator setting (here glibc's initial mmap threshold, fixed) it changes nothing,
    and every tensor is mapped and faulted in again at every step: 10 x 136 MiB of pages.
    (glibc's own dynamic thresholds reuse or fault by the heap's layout, run by run.)"""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    for name in ("GLIBC_TUNABLES", "LD_PRELOAD"):
        env.pop(name, None)

    def faults(**chosen) -> tuple[str, int]:
        run = subprocess.run([sys.executable, "-c", STEPS_OF_TENSORS], env={**env, **chosen},
                             capture_output=True, text=True)  # fmt: skip
        assert run.returncode == 0, run.stderr
        applied, count = run.stdout.split()
        return applied, int(count)

    import platform

    applied, kept = faults()
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        assert applied == "False"  # nothing to tune elsewhere, and it says so
        return
    step_pages = 136 * 2**20 // resource.getpagesize()
    # reused: fewer faults in ten steps than one step's tensors have pages. Not a fixed small
    # number: runs on one machine gave 0 to 3,840, from causes outside the allocator
    assert applied == "True" and kept < step_pages, kept
    applied, mapped = faults(MALLOC_MMAP_THRESHOLD_="131072")
    assert applied == "False" and mapped >= 10 * step_pages, mapped


USER_ALLOCATOR = ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TOP_PAD_",
                  "GLIBC_TUNABLES", "LD_PRELOAD")  # fmt: skip


@pytest.mark.parametrize("name", USER_ALLOCATOR)
def test_the_users_allocator_settings_are_left_alone(name):
    assert reuse_freed_memory({name: "x"}) is False
    assert reuse_freed_memory({name: ""}) in (True, False)  # empty is unset: no error


def test_importing_heedful_asks_for_brief_spinning_unless_told_otherwise():
    code = "import os, heedful; print(os.environ.get('GOMP_SPINCOUNT'))"
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}

    def spin_count(**chosen) -> str:
        run = subprocess.run(
            [sys.executable, "-c", code], env={**env, **chosen}, capture_output=True, text=True
        )
        assert run.returncode == 0, run.stderr
        return run.stdout.strip()

    assert spin_count() == "10000"
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
