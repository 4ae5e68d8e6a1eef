"""Decoding speed of heedful's own PyTorch search against CTranslate2 float32, alternated.

    python benchmarks/decode_speed.py --model benchmarks/work/m30k-transformer/best
    python benchmarks/decode_speed.py --model ... --baseline /tmp/heedful-head/src   # A/B a change
    python benchmarks/decode_speed.py --model ... --avx2       # as an AVX2-only CPU would run it
    python benchmarks/decode_speed.py --report                 # only rewrite docs/benchmarks.md

One trained Transformer translates the first --sentences lines of Multi30k test2016 (batch 64,
greedy and beam 5, 2 threads), each way in a long-lived worker process of its own (each engine
loads once; the libraries read their instruction-set caps when they load), in rounds: every
round times every way once, in a rotated order, so that what else runs on the machine falls on
all of them alike. Speed is the median over rounds; the ratio to CTranslate2 is the median of
the per-round ratios. On a machine whose speed drifts within a round (a busy host: one round's
CTranslate2 took 1.7 s and another's 3.1 on 2026-12-07), --pieces N has the ways take turns
on N pieces of each round's sentences, so the drift falls on every way within seconds.
--baseline names another heedful source tree (e.g. `git archive HEAD src` unpacked) run as a
third way: a change's effect, measured beside it.

Then one worker translates the first 256 sentences under torch.profiler, and the search's time
is split by what it is spent on (see `breakdown`).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from decode_speed_report import AVX2, BATCH, BEGIN, END, report  # its docs section
from report import machine, variant, write_section  # benchmarks/report.py

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT.parent / "shared" / "corpora" / "multi30k"
REPORT = ROOT / "docs" / "benchmarks.md"
RESULTS = ROOT / "benchmarks" / "results"
THREADS = 2
BEAMS = (1, 5)
PROFILED = 256  # sentences translated under the profiler


# ---- the worker: one engine, loaded once, timing what it is asked to ------------------------


def worker(way: str, model: Path, sentences: int, threads: int, batch: int) -> None:
    """Read commands from stdin ('5 0 64': translate sentences 0 to 63 with that many beams;
    'profile N'), answer one JSON line each on stdout."""
    import torch

    from heedful.inference.runtime import load_translator

    torch.set_num_threads(threads)
    sources = (CORPUS / "test2016.en").read_text(encoding="utf-8").splitlines()[:sentences]
    if way == "ctranslate2-side":  # CTranslate2's batches side by side, as heedful's
        from side_by_side import SideBySide  # benchmarks/side_by_side.py

        translator = SideBySide(model, threads)
    else:
        engine = "ctranslate2" if way == "ctranslate2" else "torch"  # an --env-way is heedful
        translator = load_translator(model, engine, threads=threads)
    for beams in BEAMS:  # warm-up: first-touch allocations, lazily built kernels
        translator.translate(sources[:batch], num_beams=beams, batch_size=batch)
    print(json.dumps({"ready": way}), flush=True)
    for line in sys.stdin:
        command = line.split()
        if command[0] == "profile":
            answer = breakdown(translator, sources[:PROFILED], int(command[1]), batch)
        else:  # "beams first end": sources[first:end]
            piece = sources[int(command[1]) : int(command[2])]
            start, cpu = time.perf_counter(), time.process_time()
            found = translator.translate(piece, num_beams=int(command[0]), batch_size=batch)
            answer = {"seconds": time.perf_counter() - start, "texts": [t.text for t in found],
                      "cpu_seconds": time.process_time() - cpu}  # fmt: skip
        print(json.dumps(answer), flush=True)


def _labelled(owner, name: str, label: str) -> None:
    """Wrap owner.name (a method) in a profiler label."""
    import torch

    method = getattr(owner, name)

    def wrapped(*args, **kwargs):
        with torch.profiler.record_function(label):
            return method(*args, **kwargs)

    setattr(owner, name, wrapped)


def _label_output_layer(transformer_module) -> None:
    """The decoder applies its output layer through layers/products.py's `apply` (packed
    weights), not by calling the layer: label that call."""
    import torch

    apply = transformer_module.apply

    def labelled(owner, name, x, **kwargs):
        if name != "generator":
            return apply(owner, name, x, **kwargs)
        with torch.profiler.record_function("output_layer"):
            return apply(owner, name, x, **kwargs)

    transformer_module.apply = labelled


CATEGORIES = {  # profiler label -> the row it is counted in
    "encode": "encoder (and the cross-attention K, V of the source)",
    "init_state": "encoder (and the cross-attention K, V of the source)",
    "self_attention": "decoder self-attention (QKV, attention, W_O)",
    "kv_cache": "self-attention cache: writes and beam reordering",
    "cross_attention": "decoder cross-attention (Q, attention, W_O)",
    "feed_forward": "decoder feed-forward",
    "output_layer": "output layer (d_model -> vocabulary)",
    "reorder": "state and memory reordering (beams, finished sentences)",
}


def breakdown(translator, sources: list[str], beams: int, batch: int) -> dict:
    """Where one translation of `sources` spends its time: each torch operator's own time, in
    the row of the innermost part of the model it ran in (labels put on the model's methods,
    here only, for this profile), or by its name (layer norm, log_softmax, embedding) in the
    search's own loop. 'Python and other' is the wall time not spent in any operator: the
    interpreter, allocation, and the profiler's own overhead (which inflates it)."""
    from torch.profiler import ProfilerActivity, profile

    from heedful.models import base
    from heedful.models import transformer as tr

    model = translator.model
    _labelled(model, "encode", "encode")
    _labelled(model, "init_state", "init_state")
    _labelled(model, "decode_step", "decode_step")
    _label_output_layer(tr)
    for layer in model.decoder.layers:
        _labelled(layer.self_attn, "project_qkv", "self_attention")
        _labelled(layer.self_attn, "attend_heads", "self_attention")
        _labelled(layer.cross_attn, "attend_projected", "cross_attention")
        _labelled(layer.feed_forward, "forward", "feed_forward")
    for name in ("append", "of", "index_select"):
        _labelled(tr.KVCache, name, "kv_cache")
    _labelled(tr.TransformerState, "index_select", "reorder")
    _labelled(base.Memory, "index_select", "reorder")
    translator.translate(sources[:batch], num_beams=beams, batch_size=batch)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        start = time.perf_counter()
        translator.translate(sources, num_beams=beams, batch_size=batch)
        wall = time.perf_counter() - start
    rows: dict[str, float] = {}
    syncs = 0
    for event in prof.events():
        if event.name in CATEGORIES or not event.name.startswith(("aten::", "mkldnn::")):
            continue
        if event.name in ("aten::item", "aten::_local_scalar_dense", "aten::is_nonzero"):
            syncs += event.name == "aten::_local_scalar_dense"
        row = _category(event)
        rows[row] = rows.get(row, 0.0) + event.self_cpu_time_total / 1e6
    rows["Python and other (outside operators)"] = wall - sum(rows.values())
    return {"wall": wall, "rows": rows, "scalar_reads": syncs, "sentences": len(sources)}


def _category(event) -> str:
    parent = event.cpu_parent
    while parent is not None:
        if parent.name in CATEGORIES:
            return CATEGORIES[parent.name]
        parent = parent.cpu_parent
    if not _under(event, "decode_step"):
        return "search: top-k, scores, bookkeeping"
    if "layer_norm" in event.name:
        return "decoder layer norms"
    if "log_softmax" in event.name:
        return "log_softmax over the vocabulary"
    return "decoder: embedding, residual adds, other"


def _under(event, name: str) -> bool:
    parent = event.cpu_parent
    while parent is not None:
        if parent.name == name:
            return True
        parent = parent.cpu_parent
    return False


# ---- the driver ---------------------------------------------------------------------------


class Worker:
    def __init__(self, way: str, args, env: dict):
        command = [sys.executable, __file__, "--worker", way, "--model", str(args.model),
                   "--sentences", str(args.sentences), "--threads", str(args.threads),
                   "--batch-size", str(args.batch_size)]  # fmt: skip
        self.process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
        )
        self.ask_nothing()

    def ask_nothing(self) -> None:
        answer = json.loads(self.process.stdout.readline())
        if "ready" not in answer:
            raise RuntimeError(f"worker did not start: {answer}")

    def ask(self, command: str) -> dict:
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"worker {self.process.args} ended")
        return json.loads(line)

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=60)


def pieces(args) -> list[tuple[int, int]]:
    """The (first, end) sentences of a round's --pieces pieces, whole batches each."""
    batches = -(-args.sentences // args.batch_size)
    size = -(-batches // max(1, args.pieces)) * args.batch_size
    return [(i, min(i + size, args.sentences)) for i in range(0, args.sentences, size)]


def one_round(workers: dict, r: int, beams: int, spans: list, times: dict, cpu: dict) -> dict:
    """Round r: every way translates each piece in turn, the order rotated from piece to
    piece; a way's time is the sum over the pieces. Returns each way's texts."""
    names, texts = list(workers), {way: [] for way in workers}
    seconds = {way: [0.0, 0.0] for way in workers}  # wall, CPU
    for i, (first, end) in enumerate(spans):
        turn = (r + i) % len(names)
        for way in names[turn:] + names[:turn]:
            answer = workers[way].ask(f"{beams} {first} {end}")
            seconds[way][0] += answer["seconds"]
            seconds[way][1] += answer["cpu_seconds"]
            texts[way] += answer["texts"]
    for way in names:
        times[beams][way].append(seconds[way][0])
        cpu[beams][way].append(seconds[way][1])
        print(f"round {r + 1} beam {beams} {way}: {seconds[way][0]:.2f} s", flush=True)
    return texts


def run(args) -> dict:
    import torch

    torch.set_num_threads(args.threads)  # as the workers, for machine()'s description
    load = [os.getloadavg()[0]]
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), **(AVX2 if args.avx2 else {}))
    bench_env = dict(env, PYTHONPATH=str(ROOT / "src"))
    ways = {"heedful": bench_env, "ctranslate2": bench_env}
    if args.threads > 1:  # CTranslate2 as its inter_threads run it, one thread a batch
        ways["ctranslate2-side"] = bench_env
    if args.baseline:
        ways["baseline"] = dict(env, PYTHONPATH=str(args.baseline.resolve()))
    for spec in args.env_way:  # NAME=VAR:VALUE,...: heedful again, under other settings
        name, _, pairs = spec.partition("=")
        ways[name] = dict(bench_env, **dict(p.split(":", 1) for p in pairs.split(",")))
        if ways[name].get("OMP_WAIT_POLICY", "").lower() == "active":
            # every way's worker stays alive between its turns, and an active worker's idle
            # threads spin without end on the cores the others are timed on: on 2 cores this
            # made every other way 1.6-3x slower (a run on an AMD EPYC, 2026-12-04)
            sys.exit(f"--env-way {spec}: an idle worker would spin on the others' cores")
    workers = {way: Worker(way, args, e) for way, e in ways.items()}
    names = list(workers)
    times = {b: {w: [] for w in names} for b in BEAMS}
    cpu = {b: {w: [] for w in names} for b in BEAMS}
    same = {b: {} for b in BEAMS}
    try:
        for r in range(args.rounds):
            for beams in BEAMS:
                texts = one_round(workers, r, beams, pieces(args), times, cpu)
                for way in names:
                    agree = sum(a == b for a, b in zip(texts[way], texts["heedful"]))
                    same[beams][way] = agree / len(texts["heedful"])
        profiles = {b: workers["heedful"].ask(f"profile {b}") for b in BEAMS}
    finally:
        for w in workers.values():
            w.close()
    searches = {}
    for beams in BEAMS:
        t, c = times[beams], cpu[beams]
        searches[str(beams)] = {
            way: {
                "sentences_per_s": args.sentences / statistics.median(t[way]),
                "seconds": t[way],
                "vs_heedful": statistics.median(h / x for h, x in zip(t["heedful"], t[way])),
                "cpu_vs_heedful": statistics.median(h / x for h, x in zip(c["heedful"], c[way])),
                "same_as_heedful": same[beams][way],
            }
            for way in names
        }
    return {
        "date": datetime.date.today().isoformat(),
        "machine": machine(),
        "avx2": args.avx2,
        "cpu": args.cpu,
        "threads": args.threads,
        "load": load + [os.getloadavg()[0]],
        "command": " ".join(["python", "benchmarks/decode_speed.py", *sys.argv[1:]]),
        "sentences": args.sentences,
        "batch_size": args.batch_size,
        "rounds": args.rounds,
        "pieces": len(pieces(args)),
        "searches": searches,
        "profiles": {str(b): p for b, p in profiles.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--model", type=Path, default=ROOT / "benchmarks/work/m30k-transformer/best"
    )
    parser.add_argument("--sentences", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--baseline", type=Path, help="another heedful src/ tree, run beside")
    parser.add_argument("--avx2", action="store_true", help="cap every library at AVX2")
    parser.add_argument(
        "--env-way",
        action="append",
        default=[],
        metavar="NAME=VAR:VALUE,...",
        help="heedful once more as way NAME, its worker under these environment variables "
        "(e.g. spin300k=GOMP_SPINCOUNT:300000: OpenMP threads that spin longer)",
    )
    parser.add_argument("--threads", type=int, default=THREADS)
    parser.add_argument(
        "--batch-size",
        type=int,
        default=BATCH,
        help="sentences a batch (1: one sentence at a time, as a server answers one caller)",
    )
    parser.add_argument(
        "--pieces",
        type=int,
        default=1,
        help="a round's sentences in this many pieces (whole batches), the ways taking turns "
        "on each: what else runs on the machine falls on all alike, over a shorter time",
    )
    parser.add_argument("--cpu", help="name another CPU's run: its own result file")
    parser.add_argument("--report", action="store_true", help="only rewrite docs/benchmarks.md")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.model, args.sentences, args.threads, args.batch_size)
        return
    if not args.report:
        result = run(args)
        batches = "" if args.batch_size == BATCH else f"-b{args.batch_size}"
        name = f"decode-speed{'-avx2' if args.avx2 else ''}-{args.threads}t{batches}.json"
        path, _, _ = variant(RESULTS / name, BEGIN, END, args.cpu)
        RESULTS.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(result, indent=2) + "\n")
    results = [json.loads(p.read_text()) for p in RESULTS.glob("decode-speed*.json")]
    # this section's CPU first (native, 2 threads first, larger batches first), then each
    # named CPU's runs
    results.sort(
        key=lambda r: (r.get("cpu") or "", r["avx2"], -r["threads"], -r.get("batch_size", BATCH))
    )
    write_section(REPORT, BEGIN, END, report(results))
    print(f"wrote {REPORT}")


if __name__ == "__main__":
    main()
