"""The machine we run on: how many threads to use and whether int8 matrix products pay off here
(how glibc's malloc is tuned for torch's tensors is allocator.py's).

Three facts about the machines we run on decide things that no config can know in advance:

- **Threads.** torch's OpenMP threads (libgomp) spin a number of rounds while they wait for
  each other, then sleep. The rounds are PAUSE instructions, whose duration differs by an
  order of magnitude among x86 CPUs (Intel's Skylake raised it from about 10 cycles to about
  140), so a count is a different time on each CPU. Decoding, whose many small operators leave
  the threads waiting between products, slows down once the spin is too short: greedy decoding
  of the Multi30k model took 1.0 s at 10,000 to 100,000 rounds on our Xeon, 1.3 s at 3,000 and
  1.7 s at 1,000 (benchmarks/decode_speed.py); 10,000 sat on that knee, and a CPU whose PAUSE
  is a few times shorter was past it (issue 30 saw greedy 1.6x slower on one EPYC than on
  another). heedful asks for 100,000 rounds, ten times the knee here, below libgomp's 300,000.
  Spinning burns the time slice another process on the same core needs, so training runs each
  batch in pieces side by side, one thread each (training/streams.py), and where a batch runs
  whole its thread count follows the cores other processes leave free (FreeCores, below).
  libgomp reads the count once, when it loads, so `heedful/__init__.py` sets it before torch is
  imported; `--threads` chooses the count of threads.
- **int8.** An int8 matrix product is fast and exact when the CPU multiplies and adds int8
  in 32 bits in one instruction (AVX-512 VNNI, or AVX-VNNI). Without it, u8·s8 products go
  through AVX2's vpmaddubsw, whose 16-bit intermediate sums saturate: CTranslate2's int8 then
  lost 19 BLEU on a small model and ran slower than float32 on a real one (issue 9, an AVX2
  EPYC). torch's dynamic quantization (fbgemm) quantizes activations to 7 bits on every CPU
  ("reduce_range") precisely so those sums cannot saturate, so it is safe everywhere.
- **Memory.** torch's CPU tensors come from glibc's malloc, whose defaults suit neither a
  training step's large tensors nor threads side by side: allocator.py.
"""

from __future__ import annotations

import math
import os
import platform
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

# Instruction-set caps that the numeric libraries read from the environment. A cap at or
# below AVX2 hides VNNI from that library even on a CPU that has it (that is how an AVX2
# machine is reproduced on an AVX-512 one: see the README's "Tests" and .ci/run).
_ISA_CAPS = (
    "CT2_FORCE_CPU_ISA",
    "ONEDNN_MAX_CPU_ISA",
    "DNNL_MAX_CPU_ISA",
    "MKL_ENABLE_INSTRUCTIONS",
)
SPIN_COUNT = 100_000  # libgomp's default is about 300,000 (see "Threads" above)
_BELOW_VNNI = {"NONE", "GENERIC", "SSE4_1", "SSE4_2", "SSE41", "SSE42", "AVX", "AVX2"}


def choose_spin_count() -> None:
    """Ask libgomp for SPIN_COUNT rounds before its waiting threads sleep, unless the user has
    chosen a wait policy or spin count. Must run before torch is first imported."""
    if "OMP_WAIT_POLICY" not in os.environ and "GOMP_SPINCOUNT" not in os.environ:
        os.environ["GOMP_SPINCOUNT"] = str(SPIN_COUNT)


def default_threads(environ=None) -> int:
    """One thread per core this process may run on, shared among the processes that torchrun
    started on this machine (LOCAL_WORLD_SIZE). torch's own default counts every physical core
    of the machine, even those a container or `taskset` keeps from us."""
    environ = os.environ if environ is None else environ
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    local_processes = int(environ.get("LOCAL_WORLD_SIZE", "1") or 1)
    return max(1, cores // max(1, local_processes))


_chosen = False  # whether a count was given to set_threads (--threads): then it stays


def set_threads(threads: int | None) -> int:
    """Use `threads` intra-op threads in torch and return the count. None: OMP_NUM_THREADS
    when the user (or torchrun) set it, else default_threads(). A count given here is the
    user's: FreeCores leaves it alone from then on."""
    global _chosen
    import torch

    if threads is None:
        count = torch.get_num_threads() if os.environ.get("OMP_NUM_THREADS") else default_threads()
    else:
        count = int(threads)
    if count < 1:
        raise ValueError(f"--threads must be at least 1, got {count}")
    if torch.get_num_threads() != count:
        torch.set_num_threads(count)
    _chosen = _chosen or threads is not None
    return count


class FreeCores:
    """torch's threads, following the cores other processes leave us: one fewer for each core
    another process keeps busy, back up when it stops. Training looks after every step where
    each batch runs whole on the threads (train.pieces 1, or a model whose batches cannot go in
    pieces: training/streams.py, whose pieces side by side keep every core), translation
    (Translator.translate) after every batch it decodes alone (batches side by side keep every
    core too: in_streams says why).

    Why: two threads beside one busy process are slower than one. Each of our threads waits
    for the other at the end of every parallel region, and the one that shares its core with
    the other process runs only part of the time, so the pair goes at the pace of the slower.
    And spinning threads, which keep decoding fast on an idle machine (SPIN_COUNT), burn the
    time slices the other process needs. Beside a single-threaded busy loop, two threads kept
    37% of the idle training rate and 8% of greedy decoding's (56% and 24% spinning 10,000
    rounds), one thread 65% and 56%, and threads that follow the free cores 66% and 49%
    (benchmarks/shared_cores.py, docs/benchmarks.md).

    Only where the threads are left to heedful (no train.threads, --threads, set_threads(N) or
    OMP_NUM_THREADS, one process on the machine): a thread count changes the order of the
    sums, hence the weights and scores in their last bits, so a pinned count is the way to
    results that do not depend on what else ran (the demo pins its own). Looks every EVERY
    seconds, from /proc/stat's per-core counters of the cores we may run on, less our own
    (Linux only).
    """

    EVERY = 2.0  # seconds between looks: many scheduler slices, a small share of a run

    def __init__(self, cores: list[int], read=None, clock=time.monotonic):
        self.cores, self.clock = cores, clock
        self.read = read if read is not None else lambda: core_ticks(cores)
        self.last = (clock(), *self.read())

    @classmethod
    def follow(cls, threads: int | None, environ=None) -> FreeCores | None:
        """A FreeCores when the thread count is heedful's to choose and there is a choice
        (2 cores or more, readable counters); else None."""
        environ = os.environ if environ is None else environ
        if threads is not None or _chosen or environ.get("OMP_NUM_THREADS"):
            return None
        if int(environ.get("LOCAL_WORLD_SIZE", "1") or 1) > 1:
            return None  # torchrun's processes share the cores on purpose
        if not hasattr(os, "sched_getaffinity"):  # not Linux
            return None
        cores = sorted(os.sched_getaffinity(0))
        try:
            return cls(cores) if len(cores) > 1 else None
        except (OSError, ValueError):  # no /proc (not Linux), or one we cannot read
            return None

    def look(self) -> tuple[int, float] | None:
        """Every EVERY seconds: set the threads the free cores call for; (threads, the cores
        the others used) when that changed the count, else None."""
        now = self.clock()
        if now - self.last[0] < self.EVERY:
            return None
        try:
            busy, total, own = self.read()
        except (OSError, ValueError, IndexError):  # /proc gone or changed: keep the count
            return None
        _, busy0, total0, own0 = self.last
        self.last = (now, busy, total, own)
        if total <= total0:
            return None
        # others = the cores' busy ticks less ours, as a count of cores
        others = max(0.0, (busy - busy0) - (own - own0)) / (total - total0) * len(self.cores)
        want = threads_for(len(self.cores), others)
        import torch

        if want == torch.get_num_threads():
            return None
        torch.set_num_threads(want)
        return want, others


def threads_for(cores: int, others: float) -> int:
    """Threads for `cores` cores of which other processes use `others` (in cores): a core
    counts as free when at least 60% of it is."""
    return max(1, min(cores, math.floor(cores - others + 0.4)))


def in_streams(work, items: list, cores: FreeCores | None = None, side_by_side=True) -> None:
    """work(item) for every item: two items or more (and side_by_side) run side by side in as
    many streams as torch has threads (or as the cores `cores` watches), one thread each;
    else one after another on all the threads, looking at the free cores after each item.

    Why: decoding a batch runs many operators too small for torch to share among threads, and
    the Python between them, so a second thread inside one batch mostly waits for the first.
    Two batches at once, one thread each, keep both busy: on a 2-core AMD EPYC greedy decoding
    of 500 Multi30k sentences ran at 158 sentences/s with two threads inside each batch and 227
    with two batches side by side (docs/benchmarks.md, "Decoding from PyTorch"). torch lets go
    of Python's lock inside its operators, so one stream's Python runs while the other's
    products do. A stream does not wait for another, so streams need not follow the free
    cores: beside a busy process, two streams decoded 151-183 sentences/s in two runs where
    one thread gave 116-123 (benchmarks/shared_cores.py). An item's result does not depend on
    what ran beside it: each runs on one thread. The first error is raised once the items in
    flight are done; the rest are not started.
    """
    import torch

    if len(items) > 1 and side_by_side:
        streams = torch.get_num_threads() if cores is None else len(cores.cores)
        if streams > 1:
            run_side_by_side(work, items, streams)
            return
    for item in items:
        work(item)
        if cores is not None:
            cores.look()  # threads for the next item, from the cores left free


def run_side_by_side(work, items: list, streams: int, threads_each: int = 1) -> None:
    """work(item) for every item in `streams` threads of our own, each running torch's
    operators on `threads_each` threads; the first error once those in flight are done."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(threads_each)  # threads that torch starts from now on take it
    pool = ThreadPoolExecutor(streams, thread_name_prefix="heedful-stream")
    try:
        for future in [pool.submit(work, item) for item in items]:
            future.result()  # in order; its error, if it failed
    finally:
        pool.shutdown(cancel_futures=True)  # waits for those in flight
        torch.set_num_threads(threads)


def core_ticks(cores: list[int], proc: Path = Path("/proc")) -> tuple[int, int, int]:
    """(busy, all) clock ticks of these cores since boot, and this process's own (all its
    threads), from /proc/stat and /proc/self/stat, in the same unit (USER_HZ)."""
    wanted, busy, total = {f"cpu{n}" for n in cores}, 0, 0
    for line in (proc / "stat").read_text(encoding="ascii").splitlines():
        name, *fields = line.split()
        if name in wanted:
            # user nice system idle iowait irq softirq steal (guest time is inside user)
            ticks = [int(f) for f in fields[:8]]
            busy, total = busy + sum(ticks) - ticks[3] - ticks[4], total + sum(ticks)
    own = (proc / "self" / "stat").read_text(encoding="ascii").rsplit(")", 1)[1].split()
    return busy, total, int(own[11]) + int(own[12])  # utime, stime: fields 14 and 15


def cpu_flags() -> set[str]:
    """The CPU's feature flags as Linux names them in /proc/cpuinfo (empty elsewhere)."""
    return set(_cpuinfo_field(("flags", "Features")).split())


def cpu_vendor() -> str:
    """/proc/cpuinfo's vendor_id ("GenuineIntel", "AuthenticAMD"); empty where unknown."""
    return _cpuinfo_field(("vendor_id",)).strip()


def _cpuinfo_field(names: tuple[str, ...]) -> str:
    """The first core's value of the first /proc/cpuinfo line that starts with one of names."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    for line in text.splitlines():
        if line.startswith(names):
            return line.split(":", 1)[1]
    return ""


def bf16_units(flags: set[str] | None = None) -> str | None:
    """The name of this x86 CPU's bfloat16 units ("AMX", "AVX512-BF16"), None without."""
    flags = cpu_flags() if flags is None else flags
    if "amx_bf16" in flags:
        return "AMX"
    return "AVX512-BF16" if "avx512_bf16" in flags else None


def bf16_missing(flags: set[str] | None = None) -> str | None:
    """Why bfloat16 would be slow here, or None: an x86 CPU without AMX or AVX512-BF16 has no
    bfloat16 units, and torch then emulates each bfloat16 product (on an AVX2-only EPYC, a
    3,000 x 256 x 1,024 product ran at 0.9 GFLOP/s against float32's 62). None also where
    the flags are unknown or the CPU is not x86, which this does not judge."""
    flags = cpu_flags() if flags is None else flags
    if not flags or platform.machine().lower() not in ("x86_64", "amd64"):
        return None
    if bf16_units(flags):
        return None
    return (
        "this CPU has no bfloat16 units (AMX or AVX512-BF16): its bfloat16 products are "
        "emulated, tens of times slower than float32's; train.bf16=false trains faster here"
    )


@dataclass(frozen=True)
class Int8Support:
    """Whether int8 matrix products are fast and exact here, and the words that say why."""

    fast: bool
    reason: str


def int8_support(flags: set[str] | None = None, environ=None) -> Int8Support:
    """VNNI (AVX-512 VNNI or AVX-VNNI) present and not capped below by the environment;
    ARM CPUs with the dot-product extension (`asimddp`) also multiply int8 in 32 bits."""
    flags = cpu_flags() if flags is None else flags
    environ = os.environ if environ is None else environ
    machine = platform.machine().lower()
    if "asimddp" in flags:
        return Int8Support(True, "this CPU has the Arm dot-product instructions (asimddp)")
    names = {"avx512_vnni": "AVX-512 VNNI", "avx_vnni": "AVX-VNNI"}
    vnni = [names[f] for f in sorted(flags & set(names))]
    if not vnni:
        what = "AVX-512 VNNI or AVX-VNNI" if machine in ("x86_64", "amd64") else "int8 dot products"
        return Int8Support(False, f"this CPU has no {what}")
    for name in _ISA_CAPS:
        value = environ.get(name, "").strip().upper()
        if value in _BELOW_VNNI:
            return Int8Support(False, f"{name}={environ[name]} hides this CPU's {vnni[0]}")
    return Int8Support(True, f"this CPU has {' and '.join(vnni)}")


def ctranslate2_compute_type(quantize: str | None, support: Int8Support | None = None) -> str:
    """CTranslate2's compute_type for `--quantize` on this CPU.

    None keeps the type the export was saved in ("default"), except that int8 weights are
    computed in float32 where int8 products would saturate. "int8" becomes "int8_float32"
    (int8 matrix products, float32 elsewhere) where it is fast and exact, else "float32" with
    a warning that names the missing CPU feature.
    """
    support = int8_support() if support is None else support
    if quantize is None:
        return "default" if support.fast else "float32"
    if support.fast:
        return "int8_float32"
    warnings.warn(
        f"--quantize {quantize}: {support.reason}, so CTranslate2's int8 products would be "
        "slower than float32 and can saturate (lose accuracy); computing in float32 instead",
        Int8Fallback,
        stacklevel=2,
    )
    return "float32"


class Int8Fallback(UserWarning):
    """int8 was asked for on a CPU where it would be slow or inexact; float32 is used."""
