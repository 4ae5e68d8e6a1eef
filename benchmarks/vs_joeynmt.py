"""Speed side by side with JoeyNMT 2.3.0, one after the other in one run, on Multi30k en→de.

    python benchmarks/vs_joeynmt.py --model runs/bench/transformer/best
    python benchmarks/vs_joeynmt.py --model ... --train-steps 40 --sentences 200   # a quick look
    python benchmarks/vs_joeynmt.py --report      # only rewrite docs/benchmarks.md

What runs, each as its own process (so each has its own peak resident memory) on 2 threads:
- training, from scratch, for the same number of steps with the same token batch size: the
  Transformer of the issue (3+3 layers, d_model 256, 4 heads, d_ff 1024, dropout 0.1) and a GRU
  encoder-decoder with Bahdanau attention (256 units), in heedful and in JoeyNMT;
- translation of test2016 (batch 64, greedy and beam 5) by one trained network: the heedful
  model given by --model (benchmarks/multi30k_quality.py trains it), and the same weights
  converted into a JoeyNMT checkpoint, so both decode the very same network;
- the same translation with int8 dynamic quantization and with CTranslate2 (fp32 and int8).

Both toolkits read one SentencePiece vocabulary (the --model's joint 8,000 pieces): heedful
through data.source.tokenizer and data.tgt_tokenizer, JoeyNMT through its sentencepiece
tokenizer and a vocabulary file of the same pieces. JoeyNMT gets its own virtual environment
(created on first use, with torch 2.13.0 as heedful's) under benchmarks/work/, which also holds
the runs.

The machine's float32 matrix-multiply rate on the same 2 threads is measured first, and the
training and decoding rates are reported as model FLOP/s against it (formula in the report).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

from report import machine, variant, write_section  # benchmarks/report.py

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT.parent / "shared" / "corpora" / "multi30k"
WORK = ROOT / "benchmarks" / "work" / "vs-joeynmt"
RESULT = ROOT / "benchmarks" / "results" / "vs-joeynmt.json"
REPORT = ROOT / "docs" / "benchmarks.md"
BEGIN, END = "<!-- vs-joeynmt:begin -->", "<!-- vs-joeynmt:end -->"
# --avx2: the kernels an AVX2-only CPU gets, on this one (children inherit the environment)
AVX2 = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2",
        "MKL_ENABLE_INSTRUCTIONS": "AVX2", "CT2_FORCE_CPU_ISA": "AVX2"}  # fmt: skip
JOEY_VERSION = "2.3.0"
THREADS = 2
BATCH_TOKENS = 3000  # padded tokens per batch, as both toolkits count them
WARMUP_STEPS = 30  # training steps left out of the rate (allocation, first-touch, caches)


# ---- processes and their peak memory ------------------------------------------------------


def measured(command: list[str], log: Path, cwd: Path = ROOT) -> tuple[float, float]:
    """Run `command` to the end with its output in `log`; (wall seconds, peak RSS in MiB).

    The peak is the child's VmHWM (/proc/PID/status), read every 20 ms while it runs. Not
    ru_maxrss: Linux carries the forking parent's resident size into the child's ru_maxrss
    across exec, so every child would seem at least as large as this script.
    """
    env = {**os.environ, "OMP_NUM_THREADS": str(THREADS), "MKL_NUM_THREADS": str(THREADS)}
    log.parent.mkdir(parents=True, exist_ok=True)
    peak = [0]

    def watch(pid: int) -> None:
        status = Path(f"/proc/{pid}/status")
        while proc.poll() is None:
            try:
                for line in status.read_text().splitlines():
                    if line.startswith("VmHWM:"):
                        peak[0] = max(peak[0], int(line.split()[1]))  # KiB
            except (OSError, ValueError):
                pass
            time.sleep(0.02)

    start = time.perf_counter()
    with log.open("w") as out:
        proc = subprocess.Popen(command, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)
        watcher = threading.Thread(target=watch, args=(proc.pid,), daemon=True)
        watcher.start()
        proc.wait()
        watcher.join()
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:])
        raise RuntimeError(f"{' '.join(command)} failed; the end of {log}:\n{tail}")
    return seconds, peak[0] / 1024


def joey_python(venv: Path) -> Path:
    """JoeyNMT's own environment: torch 2.13.0 (the CPU wheel this machine has) and joeynmt.

    JoeyNMT 2.3.0 imports importlib_metadata without declaring it, so it is installed too, and
    calls SentencePieceProcessor.SetVocabulary, which sentencepiece 0.2.1 and later lack.
    """
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        pip = [str(python), "-m", "pip", "install", "-q", "-c", str(ROOT / "constraints.txt")]
        subprocess.run(
            [
                *pip,
                "torch",
                f"joeynmt=={JOEY_VERSION}",
                "importlib_metadata",
                "sentencepiece==0.2.0",
            ],
            check=True,
        )
    return python


def versions(python: Path) -> dict:
    code = "import joeynmt, torch; print(joeynmt.__version__, torch.__version__)"
    joey, torch_version = subprocess.run(
        [str(python), "-c", code], check=True, capture_output=True, text=True
    ).stdout.split()
    import torch

    import heedful

    return {
        "joeynmt": joey,
        "joeynmt_torch": torch_version,
        "torch": torch.__version__,
        "heedful": heedful.__version__,
    }


# ---- the shared vocabulary ----------------------------------------------------------------

# heedful's ids: <pad> 0, <s> 1, </s> 2, <unk> 3. JoeyNMT puts its specials first in its own
# order (<unk> 0, <pad> 1, <s> 2, </s> 3) and then the vocabulary file's pieces. Writing pieces
# 4... in heedful's order therefore gives the same ids from 4 on; only the first four move.
JOEY_TO_OURS = [3, 0, 1, 2]


def shared_vocabulary(model_dir: Path) -> tuple[Path, Path]:
    """The model's joint SentencePiece model, as a file both toolkits read, and Joey's vocab."""
    from heedful.data.tokenizers import load_tokenizer

    src, tgt = model_dir / "tokenizer.src", model_dir / "tokenizer.tgt"
    if src.read_bytes() != tgt.read_bytes():
        raise SystemExit(
            f"{model_dir}: the benchmark needs a joint vocabulary (one for both sides)"
        )
    tokenizer = load_tokenizer(src)
    WORK.mkdir(parents=True, exist_ok=True)
    sp_model, vocab = WORK / "sp.model", WORK / "vocab.txt"
    sp_model.write_bytes(src.read_bytes())
    pieces = [tokenizer.id_to_token(i) for i in range(4, len(tokenizer))]
    vocab.write_text("".join(p + "\n" for p in pieces), encoding="utf-8")
    return sp_model, vocab


def our_learning_rate(arch: str) -> tuple[float, int]:
    """The peak learning rate and warm-up of heedful's own config for `arch`, so that both
    toolkits train with the same numbers (JoeyNMT decays by the inverse square root: the schedule
    changes no operation, so not the speed either)."""
    import yaml

    config = "transformer" if arch == "transformer" else "rnn-bahdanau"
    text = (ROOT / "configs" / "multi30k" / f"{config}.yaml").read_text(encoding="utf-8")
    train = yaml.safe_load(text)["train"]
    return float(train["lr"]), int(train["warmup_steps"])


def joey_config(arch: str, model_dir: Path, sp_model: Path, vocab: Path, steps: int) -> dict:
    side = {
        "level": "bpe",
        "lowercase": False,
        "max_length": 100,
        "voc_file": str(vocab),
        "tokenizer_type": "sentencepiece",
        "tokenizer_cfg": {"model_file": str(sp_model)},
    }
    if arch == "transformer":
        coder = {
            "type": "transformer",
            "num_layers": 3,
            "num_heads": 4,
            "embeddings": {"embedding_dim": 256, "scale": True, "dropout": 0.1},
            "hidden_size": 256,
            "ff_size": 1024,
            "dropout": 0.1,
            "layer_norm": "pre",
        }
        # as heedful's tie_embeddings: the target embedding is the output layer's weight; the
        # source embedding is its own (JoeyNMT's tied_embeddings would tie source and target)
        model = {"tied_embeddings": False, "tied_softmax": True, "encoder": coder, "decoder": coder}
    else:  # the heedful rnn-bahdanau config: 128 per direction in the encoder, 256 in the decoder
        embeddings = {"embedding_dim": 256, "dropout": 0.2}
        model = {
            "tied_embeddings": True,
            "encoder": {
                "type": "recurrent",
                "rnn_type": "gru",
                "hidden_size": 128,
                "bidirectional": True,
                "num_layers": 1,
                "dropout": 0.2,
                "embeddings": embeddings,
            },
            "decoder": {
                "type": "recurrent",
                "rnn_type": "gru",
                "hidden_size": 256,
                "num_layers": 1,
                "dropout": 0.2,
                "hidden_dropout": 0.2,
                "attention": "bahdanau",
                "input_feeding": False,
                "init_hidden": "bridge",
                "embeddings": embeddings,
            },
        }
    lr, warmup = our_learning_rate(arch)
    model.update(initializer="xavier_uniform", embed_initializer="xavier_uniform")
    return {
        "name": f"bench-{arch}",
        "joeynmt_version": JOEY_VERSION,
        "model_dir": str(model_dir),
        "use_cuda": False,
        "fp16": False,
        "random_seed": 1,
        "data": {
            "train": str(CORPUS / "train"),
            "dev": str(CORPUS / "val"),
            "test": str(CORPUS / "test2016"),
            "dataset_type": "plain",
            "sample_dev_subset": 100,
            "src": {"lang": "en", **side},
            "trg": {"lang": "de", **side},
        },
        "training": {
            "optimizer": "adam",
            "adam_betas": [0.9, 0.98],
            "learning_rate": lr,
            "learning_rate_min": 1e-9,
            "scheduling": "warmupinversesquareroot",
            "learning_rate_warmup": warmup,
            "loss": "crossentropy",
            "label_smoothing": 0.1,
            "clip_grad_norm": 1.0,
            "batch_size": BATCH_TOKENS,
            "batch_type": "token",
            "updates": steps,  # JoeyNMT reads "updates" (it logs it as max_updates)
            "epochs": 1000,
            "validation_freq": 10**9,
            "logging_freq": 10,
            "eval_metrics": ["bleu"],
            "early_stopping_metric": "bleu",
            "shuffle": True,
            "overwrite": True,
            "num_workers": 0,
            "keep_best_ckpts": 1,
            "print_valid_sents": [],
        },
        "testing": {
            "n_best": 1,
            "beam_size": 1,
            "beam_alpha": 1.0,
            "batch_size": 64,
            "batch_type": "sentence",
            "eval_metrics": ["bleu"],
            "sacrebleu_cfg": {"tokenize": "13a"},
        },
        "model": model,
    }


def write_yaml(data: dict, path: Path) -> Path:
    import yaml

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


# ---- training rates -------------------------------------------------------------------------


def median_rate(points: list[tuple[int, float, float]]) -> float:
    """Median over logging intervals after warm-up of target tokens per second.

    points: (step, tokens so far, seconds so far). The median of the intervals, not the
    overall mean, so that a moment of noise on a shared machine moves the figure little."""
    after = [p for p in points if p[0] >= WARMUP_STEPS]
    rates = [(b[1] - a[1]) / (b[2] - a[2]) for a, b in zip(after, after[1:]) if b[2] > a[2]]
    if not rates:
        raise RuntimeError(f"no logging intervals after step {WARMUP_STEPS}: train longer")
    return statistics.median(rates)


def train_ours(arch: str, sp_model: Path, steps: int) -> dict:
    config = "transformer" if arch == "transformer" else "rnn-bahdanau"
    run_dir = WORK / f"heedful-{arch}"
    yaml = ROOT / "configs" / "multi30k" / f"{config}.yaml"
    command = [
        sys.executable, "-m", "heedful", "train", str(yaml),
        "--run-dir", str(run_dir), "--force", "--no-progress",
        "--set", f"train.max_steps={steps}", "--set", "train.max_time=null",
        "--set", "train.eval_every=1000000000", "--set", "train.log_every=10",
        "--set", f"train.batch_tokens={BATCH_TOKENS}",
        "--set", f"data.source.tokenizer={sp_model}", "--set", f"data.tgt_tokenizer={sp_model}",
    ]  # fmt: skip
    seconds, rss = measured(command, WORK / "logs" / f"heedful-train-{arch}.log")
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    points = [(r["step"], r["tokens"], r["seconds"]) for r in records if "tokens" in r]
    padding = statistics.mean(r["padding"] for r in records if "padding" in r)
    return {
        "tokens_per_s": median_rate(points),
        "peak_rss_mib": rss,
        "wall_s": seconds,
        "steps": steps,
        "padding": padding,
    }


JOEY_LOG = re.compile(r"Step:\s+(\d+),.*Tokens per Sec:\s+([\d.]+)")


def train_joey(python: Path, arch: str, sp_model: Path, vocab: Path, steps: int) -> dict:
    model_dir = WORK / f"joeynmt-{arch}"
    config = joey_config(arch, model_dir, sp_model, vocab, steps)
    path = write_yaml(config, WORK / f"joeynmt-{arch}.yaml")
    log = WORK / "logs" / f"joeynmt-train-{arch}.log"
    seconds, rss = measured([str(python), "-m", "joeynmt", "train", str(path), "--skip-test"], log)
    # Joey logs the rate of each interval of logging_freq steps (validation excluded): the
    # median of those after warm-up is the same statistic as median_rate gives for heedful.
    rates = [float(r) for s, r in JOEY_LOG.findall(log.read_text()) if int(s) > WARMUP_STEPS]
    if not rates:
        raise RuntimeError(f"{log}: no 'Tokens per Sec' lines after step {WARMUP_STEPS}")
    return {
        "tokens_per_s": statistics.median(rates),
        "peak_rss_mib": rss,
        "wall_s": seconds,
        "steps": steps,
    }


# ---- the same network in JoeyNMT ---------------------------------------------------------


def joey_checkpoint(model_dir: Path, out: Path) -> None:
    """Write heedful Transformer weights as a JoeyNMT 2.3 checkpoint of the same network.

    The two implementations compute the same function (pre-norm layers, √d_model embedding
    scale, interleaved sin/cos positions, target embedding tied to the output layer), with three
    differences handled here: parameter names; the order of the four special tokens; and
    heedful's key projection has no bias (a bias on keys cancels in the softmax) while JoeyNMT's
    has one, set to zero. Two more are handled by JOEY_AS_HEEDFUL when JoeyNMT runs.
    """
    import torch
    from safetensors.torch import load_file

    from heedful.checkpoint.names import current_names
    from heedful.layers.positional import sinusoidal_encoding

    w = load_file(str(model_dir / "model.safetensors"))
    w = {today: w[name] for name, today in current_names(w).items()}  # a directory of any age
    # tied: the one matrix is saved under one of its two names
    output = w.get("decoder.generator.weight", w.get("decoder.embed.tokens.weight"))
    order = torch.tensor(JOEY_TO_OURS + list(range(4, output.shape[0])))
    sd = {}

    def linear(joey: str, ours: str, bias: bool = True) -> None:
        sd[f"{joey}.weight"] = w[f"{ours}.weight"]
        key = f"{ours}.bias"
        sd[f"{joey}.bias"] = w[key] if key in w else torch.zeros(w[f"{ours}.weight"].shape[0])

    def attention(joey: str, ours: str) -> None:
        for j, o in (
            ("q_layer", "w_q"),
            ("k_layer", "w_k"),
            ("v_layer", "w_v"),
            ("output_layer", "w_o"),
        ):
            linear(f"{joey}.{j}", f"{ours}.{o}")

    def feed_forward(joey: str, ours: str, norm: str) -> None:
        linear(f"{joey}.layer_norm", norm)
        linear(f"{joey}.pwff_layer.0", f"{ours}.net.0")
        linear(f"{joey}.pwff_layer.3", f"{ours}.net.3")

    n_enc = 1 + max(int(k.split(".")[2]) for k in w if k.startswith("encoder.layers."))
    n_dec = 1 + max(int(k.split(".")[2]) for k in w if k.startswith("decoder.layers."))
    for i in range(n_enc):
        j = o = f"encoder.layers.{i}"
        linear(f"{j}.layer_norm", f"{o}.attn_block.norm")
        attention(f"{j}.src_src_att", f"{o}.self_attn")
        feed_forward(f"{j}.feed_forward", f"{o}.feed_forward", f"{o}.ff_block.norm")
    for i in range(n_dec):
        j = o = f"decoder.layers.{i}"
        linear(f"{j}.x_layer_norm", f"{o}.self_block.norm")
        attention(f"{j}.trg_trg_att", f"{o}.self_attn")
        linear(f"{j}.dec_layer_norm", f"{o}.cross_block.norm")
        attention(f"{j}.src_trg_att", f"{o}.cross_attn")
        feed_forward(f"{j}.feed_forward", f"{o}.feed_forward", f"{o}.ff_block.norm")
    linear("encoder.layer_norm", "encoder.norm")
    linear("decoder.layer_norm", "decoder.norm")
    table = sinusoidal_encoding(5000, w["encoder.norm.weight"].shape[0]).unsqueeze(0)
    sd["encoder.pe.pe"] = sd["decoder.pe.pe"] = table
    embedding = output[order]  # tied: target embedding = output layer
    sd["src_embed.lut.weight"] = w["encoder.embed.tokens.weight"][order]
    sd["trg_embed.lut.weight"] = sd["decoder.output_layer.weight"] = embedding
    sd["decoder.output_layer.bias"] = w["decoder.generator.bias"][order]
    out.parent.mkdir(parents=True, exist_ok=True)
    state = {"model_state": {k: v.contiguous() for k, v in sd.items()}, "steps": 0}
    torch.save(state, out)


# Run JoeyNMT on the converted network, with two changes that make it compute what heedful
# computes (neither changes its speed measurably):
# - its decoder output layer is a Linear without bias: add one (8,000 additions per output token
#   next to the layer's 2 M multiply-adds) so that heedful's bias loads;
# - it appends </s> to every source sentence, and heedful's models read sources without it:
#   leave it off the source side (the one encoded without <s>), one token less for JoeyNMT.
JOEY_AS_HEEDFUL = """
import sys, torch, joeynmt.model as jm, joeynmt.vocabulary as jv
build = jm.build_model
def build_model(*args, **kwargs):
    model = build(*args, **kwargs)
    layer = model.decoder.output_layer
    layer.bias = torch.nn.Parameter(torch.zeros(layer.out_features))
    return model
jm.build_model = build_model
to_ids = jv.Vocabulary.sentences_to_ids
def sentences_to_ids(self, sentences, bos=True, eos=True):
    return to_ids(self, sentences, bos=bos, eos=eos and bos)
jv.Vocabulary.sentences_to_ids = sentences_to_ids
import joeynmt.prediction as jp
jp.build_model = build_model
from joeynmt.__main__ import main
sys.argv = ["joeynmt", *sys.argv[1:]]
main()
"""

JOEY_GENERATION = re.compile(r"Generation took ([\d.]+)\[sec\]")


def translate_joey(
    python: Path, model_dir: Path, sp_model: Path, vocab: Path, beam: int, n: int
) -> dict:
    run_dir = WORK / "joeynmt-translate"
    joey_checkpoint(model_dir, run_dir / "best.ckpt")
    config = joey_config("transformer", run_dir, sp_model, vocab, 1)
    sources = WORK / "test"
    _head(CORPUS / "test2016", sources, n)
    config["data"] = {k: v for k, v in config["data"].items() if k not in ("train", "dev")}
    config["data"]["test"] = str(sources)
    config["testing"]["beam_size"] = beam
    config["testing"]["beam_alpha"] = _generation(model_dir)["length_penalty"]
    path = write_yaml(config, WORK / f"joeynmt-translate-beam{beam}.yaml")
    out = WORK / f"joeynmt-beam{beam}"
    log = WORK / "logs" / f"joeynmt-translate-beam{beam}.log"
    _, rss = measured([str(python), "-c", JOEY_AS_HEEDFUL, "test", str(path), "-o", str(out)], log)
    found = JOEY_GENERATION.findall(log.read_text())
    if len(found) != 1:
        raise RuntimeError(f"{log}: expected one 'Generation took' line, found {len(found)}")
    hyps = Path(f"{out}.test").read_text(encoding="utf-8").splitlines()
    return _translation_result(hyps, sources, float(found[0]), rss)


def _head(prefix: Path, out_prefix: Path, n: int) -> None:
    for lang in ("en", "de"):
        lines = Path(f"{prefix}.{lang}").read_text(encoding="utf-8").splitlines()[:n]
        Path(f"{out_prefix}.{lang}").write_text("".join(t + "\n" for t in lines), encoding="utf-8")


def _generation(model_dir: Path) -> dict:
    return json.loads((model_dir / "generation.json").read_text())


def _translation_result(hyps: list[str], sources: Path, seconds: float, rss: float) -> dict:
    import sacrebleu

    refs = Path(f"{sources}.de").read_text(encoding="utf-8").splitlines()
    if len(hyps) != len(refs):
        raise RuntimeError(f"{len(hyps)} translations for {len(refs)} sentences")
    bleu = sacrebleu.corpus_bleu(hyps, [refs]).score
    return {
        "sentences_per_s": len(hyps) / seconds,
        "seconds": seconds,
        "bleu": bleu,
        "peak_rss_mib": rss,
        "sentences": len(hyps),
        "hypotheses": hyps,
    }


# ---- heedful translation, in a child process of its own -----------------------------------


def translate_ours(model_dir: Path, beam: int, n: int, runtime: str = "torch") -> dict:
    """runtime: torch | int8 (dynamic quantization) | ctranslate2 | ctranslate2-int8."""
    sources = WORK / "test"
    _head(CORPUS / "test2016", sources, n)
    out = WORK / f"heedful-{runtime}-beam{beam}.json"
    command = [sys.executable, __file__, "--child-translate", str(model_dir), "--beam", str(beam),
               "--runtime", runtime, "--child-out", str(out)]  # fmt: skip
    _, rss = measured(command, WORK / "logs" / f"heedful-translate-{runtime}-beam{beam}.log")
    child = json.loads(out.read_text())
    return _translation_result(child["hypotheses"], sources, child["seconds"], rss)


def child_translate(model_dir: Path, beam: int, runtime: str, out: Path) -> None:
    """Load, then time only the translation of every line, as JoeyNMT's 'Generation took'."""
    import torch

    torch.set_num_threads(THREADS)
    sources = (WORK / "test.en").read_text(encoding="utf-8").splitlines()
    engine = load_runtime(model_dir, runtime)
    start = time.perf_counter()
    outputs = [t.text for t in engine.translate(sources, num_beams=beam, batch_size=64)]
    seconds = time.perf_counter() - start
    out.write_text(json.dumps({"seconds": seconds, "hypotheses": outputs}))


def load_runtime(model_dir: Path, runtime: str):
    from heedful.inference.runtime import load_translator

    engine = "ctranslate2" if runtime.startswith("ctranslate2") else "torch"
    quantize = "int8" if runtime.endswith("int8") else None
    return load_translator(model_dir, engine, quantize, threads=THREADS)


# ---- the machine's limit and the model's FLOPs ------------------------------------------------


def matmul_gflops(dtype=None) -> dict:
    """float32 (or `dtype`) matrix-multiply rate on THREADS threads: a large square product and
    the shapes a training step of this model multiplies (3,000 rows by 256 → 1,024, 1,024 →
    256, 256 → 8,000). The best of them is the limit the rates below are compared with."""
    import torch

    dtype = torch.float32 if dtype is None else dtype

    torch.set_num_threads(THREADS)
    shapes = {
        "2048x2048x2048": (2048, 2048, 2048),
        "3000x256x1024": (3000, 256, 1024),
        "3000x1024x256": (3000, 1024, 256),
        "3000x256x8000": (3000, 256, 8000),
    }
    rates = {}
    for name, (m, k, n) in shapes.items():
        a, b = torch.randn(m, k, dtype=dtype), torch.randn(k, n, dtype=dtype)
        for _ in range(3):
            a @ b
        runs, start = 0, time.perf_counter()
        while (elapsed := time.perf_counter() - start) < 2.0:
            a @ b
            runs += 1
        rates[name] = 2 * m * k * n * runs / elapsed / 1e9
    return {"shapes": rates, "limit": max(rates.values())}


def forward_flops(S: int, T: int, d=256, d_ff=1024, layers=(3, 3), vocab=8000) -> float:
    """Multiply-add FLOPs (2 per multiply-add) of one forward pass over a pair of S source and
    T target tokens (each with its </s>). See the formula in docs/benchmarks.md."""
    enc, dec = layers
    encoder = enc * (S * (8 * d * d + 4 * d * d_ff) + 4 * S * S * d)
    decoder = dec * (
        T * (12 * d * d + 4 * d * d_ff) + 4 * S * d * d + 4 * T * T * d + 4 * T * S * d
    )
    return encoder + decoder + 2 * T * d * vocab


def corpus_flops(model_dir: Path, prefix: Path, hyps: list[str] | None = None) -> dict:
    """Mean training FLOPs per target token over `prefix` (3 x forward: the backward pass costs
    twice the forward), and with `hyps` the forward FLOPs per sentence of decoding them."""
    from heedful.data.tokenizers import load_tokenizer

    tok = load_tokenizer(model_dir / "tokenizer.src")
    src = Path(f"{prefix}.en").read_text(encoding="utf-8").splitlines()
    tgt = (
        hyps if hyps is not None else Path(f"{prefix}.de").read_text(encoding="utf-8").splitlines()
    )
    lengths = [(len(tok.encode(s)) + 1, len(tok.encode(t)) + 1) for s, t in zip(src, tgt)]
    total = sum(forward_flops(S, T) for S, T in lengths)
    tokens = sum(T for _, T in lengths)
    return {
        "train_per_target_token": 3 * total / tokens,
        "forward_per_sentence": total / len(lengths),
    }


# ---- the run and the report -------------------------------------------------------------------


def run(args) -> dict:
    model_dir = args.model.resolve()
    python = joey_python(args.joey_venv)
    sp_model, vocab = shared_vocabulary(model_dir)
    result = {
        "date": datetime.date.today().isoformat(),
        "machine": machine(),
        "versions": versions(python),
        "command": " ".join(["python", "benchmarks/vs_joeynmt.py", *sys.argv[1:]]),
        "threads": THREADS,
        "batch_tokens": BATCH_TOKENS,
        "train_steps": args.train_steps,
        "warmup_steps": WARMUP_STEPS,
        "matmul": matmul_gflops(),
        "flops": corpus_flops(model_dir, CORPUS / "train"),
    }
    print(f"matmul limit: {result['matmul']['limit']:.1f} GFLOP/s", flush=True)
    result["train"] = {}
    for arch in args.archs:
        result["train"][arch] = {
            "heedful": train_ours(arch, sp_model, args.train_steps),
            "joeynmt": train_joey(python, arch, sp_model, vocab, args.train_steps),
        }
        print(arch, json.dumps(result["train"][arch]), flush=True)
    result["translate"] = {}
    for beam in (1, 5):
        row = {
            "heedful": translate_ours(model_dir, beam, args.sentences),
            "joeynmt": translate_joey(python, model_dir, sp_model, vocab, beam, args.sentences),
        }
        for runtime in args.runtimes:
            try:
                row[f"heedful-{runtime}"] = translate_ours(model_dir, beam, args.sentences, runtime)
            except Exception as e:  # a runtime that is not installed: reported, not fatal
                row[f"heedful-{runtime}"] = {"error": f"{type(e).__name__}: {e}"}
        result["translate"][f"beam{beam}"] = row
        print(f"beam {beam}", {k: v.get("sentences_per_s") for k, v in row.items()}, flush=True)
    greedy = result["translate"]["beam1"]["heedful"]
    result["decode_flops"] = corpus_flops(model_dir, WORK / "test", greedy["hypotheses"])
    for row in result["translate"].values():
        base = row["heedful"]["hypotheses"]
        for entry in row.values():
            if "hypotheses" in entry:
                entry["same_as_heedful"] = sum(
                    a == b for a, b in zip(entry["hypotheses"], base)
                ) / len(base)
    return result


def ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x"


def report(result: dict) -> str:
    limit = result["matmul"]["limit"]
    per_token = result["flops"]["train_per_target_token"]
    lines = [
        BEGIN,
        "## Speed side by side with JoeyNMT",
        "",
        f"{result['date']}, {result['machine']}; JoeyNMT {result['versions']['joeynmt']} "
        f"(torch {result['versions']['joeynmt_torch']}) in its own virtual environment, "
        f"{result['threads']} threads for both, one after the other.",
        "",
        f"    {result['command']}",
        "",
        f"Training: from scratch, {result['train_steps']} steps of {result['batch_tokens']} padded "
        f"tokens per batch, Multi30k en→de, one joint SentencePiece vocabulary of 8,000 pieces "
        f"given to both. Rate = target (non-padding) tokens per second, the median over "
        f"10-step intervals after step {result['warmup_steps']}. Memory = peak resident set of "
        "the process.",
        "",
        "| model | heedful tok/s | JoeyNMT tok/s | ratio | heedful peak MiB | JoeyNMT peak MiB |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    names = {
        "transformer": "Transformer 3+3, d 256, 4 heads, d_ff 1024",
        "rnn": "GRU + Bahdanau attention, 256 units",
    }
    for arch, row in result["train"].items():
        ours, joey = row["heedful"], row["joeynmt"]
        lines.append(
            f"| {names[arch]} | {ours['tokens_per_s']:.0f} | {joey['tokens_per_s']:.0f} | "
            f"**{ratio(ours['tokens_per_s'], joey['tokens_per_s'])}** | "
            f"{ours['peak_rss_mib']:.0f} | {joey['peak_rss_mib']:.0f} |"
        )
    n = result["translate"]["beam1"]["heedful"]["sentences"]
    lines += [
        "",
        f"Translation: the first {n} sentences of test2016, batch 64, by one trained Transformer "
        "(the heedful model, and its weights converted into a JoeyNMT checkpoint: the same "
        "network). Time = generation only, after loading, as JoeyNMT's own 'Generation took'. "
        "BLEU: sacreBLEU, detokenized, case-sensitive. 'same' = outputs identical to heedful's "
        "own search. JoeyNMT runs with two changes that make it compute heedful's network "
        "(JOEY_AS_HEEDFUL in the script): a bias on its output layer, and no </s> appended "
        "to the source; its outputs differ from heedful's only by float round-off (the 'same' "
        "column). int8 = `--quantize int8`; ctranslate2 = `--engine ctranslate2`.",
        "",
        "| search | engine | sentences/s | vs JoeyNMT | vs heedful | BLEU | same | peak MiB |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for key, row in result["translate"].items():
        joey, ours = row["joeynmt"], row["heedful"]
        search = "greedy" if key == "beam1" else f"beam {key[4:]}"
        for name, entry in row.items():
            if "error" in entry:
                lines.append(f"| {search} | {name} | not run: {entry['error']} | | | | | |")
                continue
            lines.append(
                f"| {search} | {name} | {entry['sentences_per_s']:.1f} | "
                f"{ratio(entry['sentences_per_s'], joey['sentences_per_s'])} | "
                f"{ratio(entry['sentences_per_s'], ours['sentences_per_s'])} | "
                f"{entry['bleu']:.2f} | {100 * entry['same_as_heedful']:.1f}% | "
                f"{entry['peak_rss_mib']:.0f} |"
            )
    train = result["train"].get("transformer", {}).get("heedful")
    greedy = result["translate"]["beam1"]["heedful"]
    decode = greedy["sentences_per_s"] * result["decode_flops"]["forward_per_sentence"] / 1e9
    shapes = ", ".join(f"{k} {v:.0f}" for k, v in result["matmul"]["shapes"].items())
    lines += [
        "",
        "### Against the machine's limit (roofline)",
        "",
        f"float32 matrix multiply on {result['threads']} threads, GFLOP/s: {shapes}. "
        f"Limit = the best, **{limit:.0f} GFLOP/s**.",
        "",
        "Model FLOPs (2 per multiply-add) of one forward pass over S source and T target "
        "tokens, with d = 256, d_ff = 1024, V = 8000, 3 encoder and 3 decoder layers:",
        "",
        "    encoder  = 3 · (S·(8d² + 4d·d_ff) + 4S²d)",
        "    decoder  = 3 · (T·(12d² + 4d·d_ff) + 4S·d² + 4T²d + 4TSd)",
        "    output   = 2T·d·V",
        "",
        "8d²: the Q, K, V, O projections of self-attention; 4d·d_ff: the feed-forward layer; "
        "4S²d (4T²d): QKᵀ and AV of self-attention; in the decoder 4d² more for the Q and O "
        "projections of cross-attention, 4S·d² for its K and V (once per source token), and "
        "4TSd for its QKᵀ and AV. Embedding lookups, norms, softmax and the loss are not counted.",
        "",
        "    training = 3 × forward   (the backward pass costs about twice the forward)",
        "",
        f"Over the training set that is {per_token / 1e6:.1f} MFLOP per target token.",
    ]
    if train is not None:
        achieved = train["tokens_per_s"] * per_token / 1e9
        lines.append(
            f"Training at {train['tokens_per_s']:.0f} tok/s is **{achieved:.0f} GFLOP/s = "
            f"{100 * achieved / limit:.0f}% of the limit**."
        )
    lines += [
        f"Greedy decoding at {greedy['sentences_per_s']:.1f} sentences/s "
        f"({result['decode_flops']['forward_per_sentence'] / 1e6:.0f} MFLOP per sentence) is "
        f"{decode:.1f} GFLOP/s = {100 * decode / limit:.0f}% of it: one token at a time, decoding "
        "multiplies thin matrices (64 rows) and is bound by memory and per-step overhead, not "
        "by arithmetic.",
        END,
    ]
    return "\n".join(lines)


def named_report(result: dict, name: str) -> str:
    """The same report for a named run (--avx2, --cpu NAME), under its own heading and markers."""
    _, begin, end = variant(RESULT, BEGIN, END, name)
    if name == "avx2":
        what = "AVX2 kernels forced (" + ", ".join(AVX2) + ")"
    else:
        what = result["machine"].split(", torch")[0]  # the CPU's name and vector extensions
    text = report(result).replace(BEGIN, begin).replace(END, end)
    text = text.replace(
        "### Against the machine's limit",
        f"### {'AVX2' if name == 'avx2' else name}: against the machine's limit",
    )
    return text.replace(
        "## Speed side by side with JoeyNMT", f"## Speed side by side with JoeyNMT, {what}", 1
    )


README = ROOT / "README.md"
README_BEGIN, README_END = "<!-- speed-table:begin -->", "<!-- speed-table:end -->"


def readme_table(results: list[dict]) -> str:
    """The README's speed table: each CPU's run (native kernels), with the CPU named."""
    first = results[0]
    lines = [
        README_BEGIN,
        f"Measured against JoeyNMT {first['versions']['joeynmt']} on the same machine in the "
        "same run, with the same model, vocabulary and batch size, on each CPU we had "
        "(`python benchmarks/vs_joeynmt.py [--cpu NAME]`, which writes these tables; method, "
        "memory and the roofline in [docs/benchmarks.md](docs/benchmarks.md)).",
    ]
    for result in results:
        lines += ["", *_readme_rows(result)]
    return "\n".join([*lines, README_END])


def _readme_rows(result: dict) -> list[str]:
    train, translate = result["train"], result["translate"]
    rows = [
        ("training, Transformer 3+3 d256 (target tok/s)", train.get("transformer"), "tokens_per_s"),
        ("training, GRU + Bahdanau 256 (target tok/s)", train.get("rnn"), "tokens_per_s"),
        ("translating test2016, greedy (sentences/s)", translate.get("beam1"), "sentences_per_s"),
        ("translating test2016, beam 5 (sentences/s)", translate.get("beam5"), "sentences_per_s"),
    ]
    lines = [
        f"**{result['machine']}**, {result['date']}:",
        "",
        "| | heedful | JoeyNMT | ratio |",
        "| --- | ---: | ---: | ---: |",
    ]
    for label, row, key in rows:
        if row is None or "error" in row["heedful"] or "error" in row["joeynmt"]:
            continue
        ours, joey = row["heedful"][key], row["joeynmt"][key]
        form = ",.0f" if key == "tokens_per_s" else ",.1f"  # thousands of tokens: whole
        lines.append(f"| {label} | {ours:{form}} | {joey:{form}} | {ratio(ours, joey)} |")
    if "transformer" in train:
        achieved = train["transformer"]["heedful"]["tokens_per_s"]
        achieved *= result["flops"]["train_per_target_token"] / 1e9
        lines += [
            "",
            f"Training runs at {100 * achieved / result['matmul']['limit']:.0f}% of what this "
            "CPU's float32 matrix multiply can do.",
        ]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--model", type=Path, default=ROOT / "runs" / "bench" / "transformer" / "best"
    )
    parser.add_argument(
        "--joey-venv", type=Path, default=ROOT / "benchmarks" / "work" / "joey-venv"
    )
    parser.add_argument("--train-steps", type=int, default=150)
    parser.add_argument("--sentences", type=int, default=1000)
    parser.add_argument("--archs", nargs="*", default=["transformer", "rnn"])
    parser.add_argument(
        "--runtimes", nargs="*", default=["int8", "ctranslate2", "ctranslate2-int8"]
    )
    parser.add_argument(
        "--report", action="store_true", help="only rewrite docs/benchmarks.md and the README table"
    )
    parser.add_argument(
        "--avx2", action="store_true", help="force AVX2 kernels; its own result and section"
    )
    parser.add_argument("--cpu", help="name another CPU's run: its own result and section")
    parser.add_argument("--child-translate", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--beam", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--runtime", help=argparse.SUPPRESS)
    parser.add_argument("--child-out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child_translate:
        child_translate(args.child_translate, args.beam, args.runtime, args.child_out)
        return
    if args.avx2 and args.cpu:
        parser.error("--avx2 and --cpu: name one of them")
    name = "avx2" if args.avx2 else args.cpu
    result_path, begin, end = variant(RESULT, BEGIN, END, name)
    if args.avx2:  # before anything here or in a child imports torch
        os.environ.update(AVX2)
    if not args.report:
        result = run(args)
        if args.avx2:
            result["command"] = " ".join(
                [*(f"{k}={v}" for k, v in AVX2.items()), result["command"]]
            )
        for search, row in result["translate"].items():  # outputs stay in the work directory
            for engine, entry in row.items():
                if "hypotheses" in entry:
                    path = WORK / f"hyps-{engine}-{search}.txt"
                    path.write_text("\n".join(entry.pop("hypotheses")) + "\n", encoding="utf-8")
        result_path.parent.mkdir(parents=True, exist_ok=True)
        result_path.write_text(json.dumps(result, indent=2) + "\n")
    result = json.loads(result_path.read_text())
    write_section(REPORT, begin, end, named_report(result, name) if name else report(result))
    # the README's tables: the native runs, one per CPU (an --avx2 run is not another CPU)
    native = [RESULT, *sorted(RESULT.parent.glob(f"{RESULT.stem}-*.json"))]
    results = [
        json.loads(p.read_text()) for p in native if p.exists() and p.stem != "vs-joeynmt-avx2"
    ]
    write_section(README, README_BEGIN, README_END, readme_table(results))
    print(f"wrote {result_path}, {REPORT} and the tables in {README}")


if __name__ == "__main__":
    main()
