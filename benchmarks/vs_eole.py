"""Speed and quality side by side with Eole 0.6.4 (OpenNMT-py's successor), in one run.

    python benchmarks/vs_eole.py --model runs/bench/transformer/best
    python benchmarks/vs_eole.py --train-steps 6 --warmup-steps 2 --log-every 2 --sentences 50
    python benchmarks/vs_eole.py --report      # only rewrite docs/benchmarks.md

What runs, each as its own process (so each has its own peak resident memory) on 2 threads:
- training, from scratch, for the same number of steps with the same token batch size, of the
  Transformer of our Multi30k recipe (src/heedful/recipes/multi30k/transformer.yaml: 3+3
  pre-norm layers, d_model 256, 4 heads, d_ff 1024, dropout 0.1, target embedding tied to the
  output layer), in heedful and in Eole; the parameter counts of both are printed and must match;
- translation of test2016 (batch 64, greedy and beam 5) by one trained network: the heedful
  model given by --model (benchmarks/multi30k_quality.py trains it; without --model, the one
  the training run above saved), and the same weights converted into an Eole model directory
  (eole_checkpoint below), so that both decode the very same network. The share of identical
  greedy outputs is printed: it says the conversion is right.

Both toolkits read one SentencePiece vocabulary: the --model's (joint), or one trained once here
with heedful as the recipe would train it, handed to both. Eole lives in its own virtual
environment (--eole-python; made with `python3 -m venv /work/.venv-eole &&
/work/.venv-eole/bin/pip install -c <(echo torch==2.13.0) eole==0.6.4 aiohttp`: eole's CLI
imports aiohttp without declaring it) and runs in child processes of that python only.
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

from report import cpu, variant, write_section  # benchmarks/report.py
from vs_joeynmt import load_runtime, measured, write_yaml  # the same child processes and RSS

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT.parent / "shared" / "corpora" / "multi30k"
RECIPE = ROOT / "src" / "heedful" / "recipes" / "multi30k" / "transformer.yaml"
WORK = ROOT / "benchmarks" / "work" / "vs-eole"
RESULT = ROOT / "benchmarks" / "results" / "vs-eole.json"
REPORT = ROOT / "docs" / "benchmarks.md"
BEGIN, END = "<!-- vs-eole:begin -->", "<!-- vs-eole:end -->"
EOLE_VERSION = "0.6.4"
THREADS = 2  # as vs_joeynmt.measured sets OMP_NUM_THREADS / MKL_NUM_THREADS for every child
BATCH_TOKENS = 3000  # padded tokens per batch: both count (batch size) x (its longest side)
SPECIALS = {"pad_token": "<pad>", "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}

# Eole's command line in its own python, on THREADS threads (it never calls set_num_threads).
EOLE_MAIN = (
    f"import sys, torch; torch.set_num_threads({THREADS}); from eole.bin.main import main; "
    "sys.argv = ['eole', *sys.argv[1:]]; main()"
)

# Eole's translation, timed as heedful's: load first, then only the translation of every line.
EOLE_TRANSLATE = """
import json, sys, time, torch
torch.set_num_threads(%d)
from eole.config.run import PredictConfig
from eole.inference_engine import InferenceEnginePY
model, src, beam, alpha, out = sys.argv[1:]
config = PredictConfig(model_path=model, src=src, beam_size=int(beam), length_penalty="wu",
                       alpha=float(alpha), batch_size=64, batch_type="sents", world_size=1,
                       gpu_ranks=[], compute_dtype="fp32", seed=1, max_length_ratio=%r)
engine = InferenceEnginePY(config)
lines = open(src, encoding="utf-8").read().splitlines()
start = time.perf_counter()
_, _, preds = engine.infer_list(lines)
seconds = time.perf_counter() - start
json.dump({"seconds": seconds, "hypotheses": [p[0] for p in preds]}, open(out, "w"))
"""


def recipe() -> dict:
    import yaml

    return yaml.safe_load(RECIPE.read_text(encoding="utf-8"))


def eole_version(python: Path) -> dict:
    code = "import eole, torch; print(eole.__version__, torch.__version__)"
    out = subprocess.run([str(python), "-c", code], check=True, capture_output=True, text=True)
    eole, torch_version = out.stdout.split()[-2:]
    if eole != EOLE_VERSION:
        raise SystemExit(f"{python}: eole {eole}, the benchmark is written for {EOLE_VERSION}")
    import torch

    import heedful

    return {"eole": eole, "eole_torch": torch_version, "torch": torch.__version__,
            "heedful": heedful.__version__}  # fmt: skip


# ---- the shared vocabulary ----------------------------------------------------------------


def shared_vocabulary(model_dir: Path | None) -> tuple[Path, Path]:
    """One SentencePiece model for both toolkits (the --model's, or trained once here as the
    recipe trains it) and Eole's vocabulary file: every piece in heedful's id order.

    Eole numbers a vocabulary file's tokens in file order and adds only the specials it lacks;
    with its specials named as ours (<pad> <s> </s> <unk>, ids 0-3) it adds none, so every
    piece has the same id in both toolkits and the converter copies embeddings row for row."""
    from heedful.data.tokenizers import load_tokenizer, train_tokenizers

    WORK.mkdir(parents=True, exist_ok=True)
    sp_model, vocab = WORK / "sp.model", WORK / "vocab.txt"
    if model_dir is not None:
        src, tgt = model_dir / "tokenizer.src", model_dir / "tokenizer.tgt"
        if src.read_bytes() != tgt.read_bytes():
            raise SystemExit(f"{model_dir}: the benchmark needs a joint vocabulary")
        sp_model.write_bytes(src.read_bytes())
    else:
        data = recipe()["data"]
        lines = [(CORPUS / f"train.{lang}").read_text(encoding="utf-8").splitlines()
                 for lang in ("en", "de")]  # fmt: skip
        tokenizer, _ = train_tokenizers(*lines, "sentencepiece", data["vocab_size"],
                                        data["sp_model_type"], joint=True)  # fmt: skip
        tokenizer.save(sp_model)
    tokenizer = load_tokenizer(sp_model)
    pieces = [tokenizer.id_to_token(i) for i in range(len(tokenizer))]
    vocab.write_text("".join(p + "\n" for p in pieces), encoding="utf-8")
    return sp_model, vocab


# ---- the same Transformer in Eole ---------------------------------------------------------


def eole_config(sp_model: Path, vocab: Path, run_dir: Path, steps: int, log_every: int) -> dict:
    """Eole's config for the recipe's model and training settings.

    Eole has biases on Q, V and the output projections and none on K (add_key_bias false), as
    heedful; add_final_linear_bias is set on the encoder too, where the model-level setting does
    not reach in 0.6.4 (3 x 256 parameters short otherwise). bucket_size = the corpus, so that
    Eole, as heedful, batches one epoch at a time (its default 262,144 reads Multi30k 9 times
    into memory before the first step). Learning rate: Eole's "noam" (linear warm-up to the
    recipe's peak, then inverse square root) where the recipe decays linearly to the end of its
    30 minutes: the schedule changes no operation, so not the speed. num_workers 0: data
    preparation in the training process, as heedful's, not in extra processes beside the 2
    threads."""
    r = recipe()
    m, t, d = r["model"], r["train"], r["data"]
    pairs = len((CORPUS / "train.en").read_text(encoding="utf-8").splitlines())
    return {
        "seed": t["seed"], "report_every": log_every, "overwrite": True, "n_sample": 0,
        "src_vocab": str(vocab), "tgt_vocab": str(vocab), "share_vocab": True,
        "src_vocab_size": 8000, "tgt_vocab_size": 8000, "vocab_size_multiple": 1, **SPECIALS,
        "data": {"corpus_1": {"path_src": str(CORPUS / "train.en"),
                              "path_tgt": str(CORPUS / "train.de")}},
        "transforms": ["sentencepiece", "filtertoolong"],
        "transforms_configs": {
            "sentencepiece": {"src_subword_model": str(sp_model),
                              "tgt_subword_model": str(sp_model)},
            "filtertoolong": {"src_seq_length": d["max_length"],
                              "tgt_seq_length": d["max_length"]},
        },
        "training": {
            "model_path": str(run_dir), "save_format": "safetensors",
            "save_checkpoint_steps": 10**9, "valid_steps": 10**9, "train_steps": steps,
            "world_size": 1, "gpu_ranks": [], "num_workers": 0, "bucket_size": pairs,
            "batch_type": "tokens", "batch_size": BATCH_TOKENS, "normalization": "tokens",
            "optim": "adam", "adam_beta1": t["betas"][0], "adam_beta2": t["betas"][1],
            "learning_rate": t["lr"] * (m["d_model"] * t["warmup_steps"]) ** 0.5,
            "decay_method": "noam", "warmup_steps": t["warmup_steps"],  # peak t["lr"] as ours
            "max_grad_norm": t["clip_norm"], "label_smoothing": t["label_smoothing"],
            "dropout": [m["dropout"]], "attention_dropout": [m["attention_dropout"]],
            "param_init_method": "xavier_uniform", "compute_dtype": "fp32",
        },
        "model": {
            "architecture": "transformer", "hidden_size": m["d_model"], "heads": m["num_heads"],
            "layers": m["encoder"]["layers"], "transformer_ff": m["d_ff"],
            "add_qkvbias": True, "add_key_bias": False, "add_final_linear_bias": True,
            "add_ffnbias": True, "share_decoder_embeddings": m["decoder"]["tie_embeddings"],
            "share_embeddings": False, "generator_bias": True,
            "encoder": {"add_final_linear_bias": True},
            "embeddings": {"word_vec_size": m["d_model"],
                           "position_encoding_type": "SinusoidalInterleaved"},
        },
    }  # fmt: skip


def eole_checkpoint(model_dir: Path, config: dict, out: Path) -> None:
    """Write a heedful Transformer model directory as an Eole model directory of the same network:
    config.json (the config Eole trains with), vocab.json and model.00.safetensors.

    The two compute the same function: pre-norm layers with a final norm per stack, embeddings
    × √d_model plus interleaved sinusoids from position 0, scaled dot-product attention without
    a key bias, ReLU feed-forward, target embedding tied to the output layer. Only the names
    differ, and our sinusoid table (float64, cast) is written over Eole's (float32).
    """
    import torch
    from safetensors.torch import load_file, save_file

    from heedful.checkpoint.names import current_names
    from heedful.layers.positional import sinusoidal_encoding

    w = load_file(str(model_dir / "model.safetensors"))
    w = {today: w[name] for name, today in current_names(w).items()}  # a directory of any age
    sd: dict[str, torch.Tensor] = {}

    def copy(eole: str, ours: str) -> None:
        for part in ("weight", "bias"):
            if f"{ours}.{part}" in w:
                sd[f"{eole}.{part}"] = w[f"{ours}.{part}"]

    def attention(eole: str, ours: str) -> None:
        for e, o in (("linear_query", "w_q"), ("linear_keys", "w_k"),
                     ("linear_values", "w_v"), ("final_linear", "w_o")):  # fmt: skip
            copy(f"{eole}.{e}", f"{ours}.{o}")

    def layers(prefix: str) -> int:
        return 1 + max(int(k.split(".")[2]) for k in w if k.startswith(prefix))

    for i in range(layers("encoder.layers.")):
        e, o = f"encoder.transformer_layers.{i}", f"encoder.layers.{i}"
        copy(f"{e}.input_layernorm", f"{o}.attn_block.norm")
        attention(f"{e}.self_attn", f"{o}.self_attn")
        copy(f"{e}.post_attention_layernorm", f"{o}.ff_block.norm")
        copy(f"{e}.mlp.gate_up_proj", f"{o}.feed_forward.net.0")
        copy(f"{e}.mlp.down_proj", f"{o}.feed_forward.net.3")
    for i in range(layers("decoder.layers.")):
        e, o = f"decoder.transformer_layers.{i}", f"decoder.layers.{i}"
        copy(f"{e}.input_layernorm", f"{o}.self_block.norm")
        attention(f"{e}.self_attn", f"{o}.self_attn")
        copy(f"{e}.precontext_layernorm", f"{o}.cross_block.norm")
        attention(f"{e}.context_attn", f"{o}.cross_attn")
        copy(f"{e}.post_attention_layernorm", f"{o}.ff_block.norm")
        copy(f"{e}.mlp.gate_up_proj", f"{o}.feed_forward.net.0")
        copy(f"{e}.mlp.down_proj", f"{o}.feed_forward.net.3")
        sd[f"{e}.layer_scalar"] = torch.ones(1)  # Eole's Gemma-style scale, 1 here
    copy("encoder.layer_norm", "encoder.norm")
    copy("decoder.layer_norm", "decoder.norm")
    sd["src_emb.embeddings.weight"] = w["encoder.embed.tokens.weight"]
    # tied (heedful saves the one matrix under one of its names): Eole's tgt embedding is it too
    output = w.get("decoder.generator.weight", w.get("decoder.embed.tokens.weight"))
    sd["tgt_emb.embeddings.weight"] = w.get("decoder.embed.tokens.weight", output)
    tied = "decoder.embed.tokens.weight" not in w or "decoder.generator.weight" not in w
    if not tied:
        sd["generator.weight"] = output
    config = {**config, "model": {**config["model"], "share_decoder_embeddings": tied}}
    sd["generator.bias"] = w["decoder.generator.bias"]
    d = w["encoder.norm.weight"].shape[0]
    for side in ("src", "tgt"):  # (5000, 1, D): Eole's buffer shape
        sd[f"{side}_emb.pe.pe"] = sinusoidal_encoding(5000, d).unsqueeze(1)
    pieces = (WORK / "vocab.txt").read_text(encoding="utf-8").splitlines()
    vocab = {"src": pieces, "tgt": pieces, "decoder_start_token": "<s>", "specials": SPECIALS}
    out.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in sd.items()}, str(out / "model.00.safetensors"))
    (out / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    (out / "config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")


# ---- training rates -------------------------------------------------------------------------


def median_after(rates: list[tuple[int, float]], warmup: int) -> float:
    """Median over logging intervals that end after step `warmup` of target tokens per second:
    the median, so that a moment of noise on a shared machine moves the figure little."""
    after = [rate for step, rate in rates if step > warmup]
    if not after:
        raise RuntimeError(f"no logging intervals after step {warmup}: train longer")
    return statistics.median(after)


def heedful_parameters() -> int:
    """Parameters of the recipe's model (tied matrices counted once, as Eole counts them)."""
    from heedful.config import load_config
    from heedful.models.build import build_model

    model = build_model(load_config(RECIPE).model, 8000, 8000)
    return sum(p.numel() for p in model.parameters())


def train_heedful(sp_model: Path, args) -> dict:
    run_dir = WORK / "heedful-train"
    command = [
        sys.executable, "-m", "heedful", "train", str(RECIPE),
        "--run-dir", str(run_dir), "--force", "--no-progress",
        "--set", f"train.max_steps={args.train_steps}", "--set", "train.max_time=null",
        "--set", "train.eval_every=1000000000", "--set", f"train.log_every={args.log_every}",
        "--set", f"train.batch_tokens={BATCH_TOKENS}",
        "--set", f"data.source.tokenizer={sp_model}", "--set", f"data.tgt_tokenizer={sp_model}",
        "--set", f"data.train_src={CORPUS / 'train.en'}",
        "--set", f"data.train_tgt={CORPUS / 'train.de'}",
        "--set", f"data.valid_src={CORPUS / 'val.en'}",
        "--set", f"data.valid_tgt={CORPUS / 'val.de'}",
    ]  # fmt: skip
    seconds, rss = measured(command, WORK / "logs" / "heedful-train.log")
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    points = [(r["step"], r["tokens"], r["seconds"]) for r in records if "tokens" in r]
    rates = [(b[0], (b[1] - a[1]) / (b[2] - a[2])) for a, b in zip(points, points[1:])]
    steps = [(b[0] - a[0], b[1] - a[1]) for a, b in zip(points, points[1:])]
    return {
        "tokens_per_s": median_after(rates, args.warmup_steps),
        "tokens_per_step": sum(t for _, t in steps) / max(1, sum(s for s, _ in steps)),
        "peak_rss_mib": rss, "wall_s": seconds, "steps": args.train_steps,
        "parameters": heedful_parameters(), "run_dir": str(run_dir),
    }  # fmt: skip


# Eole logs each interval of report_every steps: "Step 20/ 150; ...; bsz: S/T/N; s/t tok/s; ..."
EOLE_STEP = re.compile(
    r"Step\s+(\d+)/\s*\d+;.*?bsz:\s*[\d.]+/\s*([\d.]+)/.*?([\d.]+)/\s*([\d.]+) tok/s"
)
EOLE_PARAMETERS = re.compile(r"\* number of parameters: (\d+)")


def train_eole(python: Path, sp_model: Path, vocab: Path, args) -> dict:
    run_dir = WORK / "eole-train"
    config = eole_config(sp_model, vocab, run_dir, args.train_steps, args.log_every)
    path = write_yaml(config, WORK / "eole-train.yaml")
    log = WORK / "logs" / "eole-train.log"
    seconds, rss = measured([str(python), "-c", EOLE_MAIN, "train", "-config", str(path)], log)
    text = log.read_text(errors="replace")
    found = EOLE_STEP.findall(text)  # rates of target (non-padding) tokens, as heedful's
    rates = [(int(step), float(tgt)) for step, _, _, tgt in found]
    return {
        "tokens_per_s": median_after(rates, args.warmup_steps),
        "tokens_per_step": statistics.mean(float(b) for _, b, _, _ in found),
        "peak_rss_mib": rss, "wall_s": seconds, "steps": args.train_steps,
        "parameters": int(EOLE_PARAMETERS.findall(text)[-1]),
    }  # fmt: skip


# ---- translation ------------------------------------------------------------------------------


def head_of_test2016(n: int) -> Path:
    prefix = WORK / "test"
    for lang in ("en", "de"):
        lines = (CORPUS / f"test2016.{lang}").read_text(encoding="utf-8").splitlines()[:n]
        Path(f"{prefix}.{lang}").write_text("".join(t + "\n" for t in lines), encoding="utf-8")
    return prefix


def translation_result(child: Path, rss: float) -> dict:
    import sacrebleu

    out = json.loads(child.read_text())
    hyps = out["hypotheses"]
    refs = (WORK / "test.de").read_text(encoding="utf-8").splitlines()
    if len(hyps) != len(refs):
        raise RuntimeError(f"{child}: {len(hyps)} translations for {len(refs)} sentences")
    return {
        "sentences_per_s": len(hyps) / out["seconds"], "seconds": out["seconds"],
        "bleu": sacrebleu.corpus_bleu(hyps, [refs]).score, "peak_rss_mib": rss,
        "sentences": len(hyps), "hypotheses": hyps,
    }  # fmt: skip


def translate_heedful(model_dir: Path, beam: int) -> dict:
    out = WORK / f"heedful-beam{beam}.json"
    command = [sys.executable, __file__, "--child-translate", str(model_dir),
               "--beam", str(beam), "--child-out", str(out)]  # fmt: skip
    _, rss = measured(command, WORK / "logs" / f"heedful-translate-beam{beam}.log")
    return translation_result(out, rss)


def child_translate(model_dir: Path, beam: int, out: Path) -> None:
    """Load, then time only the translation of every line (as EOLE_TRANSLATE does)."""
    import torch

    torch.set_num_threads(THREADS)
    sources = (WORK / "test.en").read_text(encoding="utf-8").splitlines()
    engine = load_runtime(model_dir, "torch")
    start = time.perf_counter()
    outputs = [t.text for t in engine.translate(sources, num_beams=beam, batch_size=64)]
    seconds = time.perf_counter() - start
    out.write_text(json.dumps({"seconds": seconds, "hypotheses": outputs}))


def generation(model_dir: Path) -> dict:
    return json.loads((model_dir / "generation.json").read_text())


def translate_eole(python: Path, eole_dir: Path, model_dir: Path, beam: int) -> dict:
    """Eole's length penalty "wu" is heedful's GNMT ((5 + |Y|) / 6) ** alpha, alpha the model's.
    Output limits differ in form: heedful's is ratio · S + offset per sentence, Eole's
    ratio · (the batch's longest S) + 5; both get the model's ratio (rarely reached here)."""
    gen = generation(model_dir)
    out = WORK / f"eole-beam{beam}.json"
    code = EOLE_TRANSLATE % (THREADS, float(gen.get("max_len_ratio", 1.5)))
    command = [str(python), "-c", code, str(eole_dir), str(WORK / "test.en"), str(beam),
               str(gen["length_penalty"]), str(out)]  # fmt: skip
    _, rss = measured(command, WORK / "logs" / f"eole-translate-beam{beam}.log")
    return translation_result(out, rss)


# ---- the run and the report -------------------------------------------------------------------


def trained_model(run_dir: Path) -> Path:
    """The model directory heedful's training run saved (when no --model is given)."""
    for name in ("best", "last", "final"):
        if (run_dir / name / "model.safetensors").exists():
            return run_dir / name
    found = sorted(run_dir.rglob("model.safetensors"))
    if not found:
        raise SystemExit(f"{run_dir}: no model.safetensors; give --model")
    return found[-1].parent


def prefix_equal(a: str, b: str) -> bool:
    """One output is the other cut short: the same network, stopped by the two toolkits'
    different output limits (a network that never writes </s> runs into them)."""
    a_words, b_words = a.split(), b.split()
    n = min(len(a_words), len(b_words))
    return a_words[:n] == b_words[:n]


def run(args) -> dict:
    python = args.eole_python
    sp_model, vocab = shared_vocabulary(args.model.resolve() if args.model else None)
    result = {
        "date": datetime.date.today().isoformat(), "cpu": cpu(), "versions": eole_version(python),
        "command": " ".join(["python", "benchmarks/vs_eole.py", *sys.argv[1:]]),
        "threads": THREADS, "batch_tokens": BATCH_TOKENS, "train_steps": args.train_steps,
        "warmup_steps": args.warmup_steps, "log_every": args.log_every,
    }  # fmt: skip
    train = {
        "heedful": train_heedful(sp_model, args),
        "eole": train_eole(python, sp_model, vocab, args),
    }
    result["train"] = train
    counts = {k: v["parameters"] for k, v in train.items()}
    print("parameters:", counts, "training tok/s:",
          {k: round(v["tokens_per_s"]) for k, v in train.items()}, flush=True)  # fmt: skip
    if len(set(counts.values())) != 1:
        raise SystemExit(f"the two models differ in size: {counts}")
    model_dir = args.model.resolve() if args.model else trained_model(WORK / "heedful-train")
    result["model"] = str(model_dir)
    eole_dir = WORK / "eole-converted"
    config = eole_config(sp_model, vocab, eole_dir, 1, args.log_every)
    eole_checkpoint(model_dir, config, eole_dir)
    head_of_test2016(args.sentences)
    result["translate"] = {}
    for beam in (1, 5):
        row = {"heedful": translate_heedful(model_dir, beam),
               "eole": translate_eole(python, eole_dir, model_dir, beam)}  # fmt: skip
        ours, theirs = row["heedful"]["hypotheses"], row["eole"]["hypotheses"]
        row["same"] = sum(a == b for a, b in zip(ours, theirs)) / len(ours)
        row["same_prefix"] = sum(map(prefix_equal, ours, theirs)) / len(ours)
        result["translate"][f"beam{beam}"] = row
        rates = {k: round(row[k]["sentences_per_s"], 1) for k in ("heedful", "eole")}
        print(
            f"beam {beam}: sentences/s {rates}, identical outputs {100 * row['same']:.1f}%, "
            f"one a prefix of the other {100 * row['same_prefix']:.1f}%",
            flush=True,
        )
    return result


def ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b else "–"


def report(result: dict, name: str | None = None, begin: str = BEGIN, end: str = END) -> str:
    c, v, train = result["cpu"], result["versions"], result["train"]
    h, e = train["heedful"], train["eole"]
    rows = [
        ("training, target tok/s", h["tokens_per_s"], e["tokens_per_s"], ".0f"),
        ("training, peak RSS MiB", h["peak_rss_mib"], e["peak_rss_mib"], ".0f"),
    ]
    for key, row in result["translate"].items():
        search = "greedy" if key == "beam1" else f"beam {key[4:]}"
        ours, theirs = row["heedful"], row["eole"]
        rows += [
            (f"{search}, sentences/s", ours["sentences_per_s"], theirs["sentences_per_s"], ".1f"),
            (f"{search}, BLEU", ours["bleu"], theirs["bleu"], ".2f"),
            (f"{search}, peak RSS MiB", ours["peak_rss_mib"], theirs["peak_rss_mib"], ".0f"),
        ]
    n = result["translate"]["beam1"]["heedful"]["sentences"]
    same = ", ".join(f"{'greedy' if k == 'beam1' else 'beam ' + k[4:]} {100 * r['same']:.1f}% "
                     f"({100 * r['same_prefix']:.1f}% one a prefix of the other)"
                     for k, r in result["translate"].items())  # fmt: skip
    isa = "/".join(c["flags"]) or "no AVX2"
    lines = [
        begin, "## Side by side with Eole" + (f": {c['model']}, {isa}" if name else ""), "",
        f"{result['date']}, {c['model']} ({', '.join(c['flags']) or 'no AVX2'}); heedful "
        f"{v['heedful']} (torch {v['torch']}), Eole {v['eole']} (torch {v['eole_torch']}) in "
        f"its own virtual environment; {result['threads']} threads each, one after the other.", "",
        f"    {result['command']}", "",
        f"Training: the recipe's Transformer ({h['parameters']:,} parameters in both), "
        f"from scratch, {result['train_steps']} steps of {result['batch_tokens']} padded tokens "
        f"per batch (target tokens per step: heedful {h['tokens_per_step']:.0f}, Eole "
        f"{e['tokens_per_step']:.0f}), one SentencePiece vocabulary given to both. Rate = "
        f"target (non-padding) tokens per second, median over {result['log_every']}-step intervals "
        f"after step {result['warmup_steps']}. Translation: the first {n} sentences of test2016, "
        "batch 64, by one trained network, in heedful and converted into an Eole model directory; "
        "time = translation only, after loading. Identical outputs (heedful vs Eole): "
        f"{same}. BLEU: sacreBLEU, detokenized. Memory: peak resident set of the process.", "",
        "| figure | heedful | Eole | heedful/Eole |", "|---|---:|---:|---:|",
    ]  # fmt: skip
    for label, ours, theirs, form in rows:
        lines.append(f"| {label} | {ours:{form}} | {theirs:{form}} | {ratio(ours, theirs)} |")
    return "\n".join([*lines, end])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", type=Path, help="a trained heedful model dir (joint vocab)")
    parser.add_argument("--eole-python", type=Path, default=Path("/work/.venv-eole/bin/python"))
    parser.add_argument("--train-steps", type=int, default=150)
    parser.add_argument("--warmup-steps", type=int, default=30, help="steps left out of the rate")
    parser.add_argument("--log-every", type=int, default=10)
    parser.add_argument("--sentences", type=int, default=1000)
    parser.add_argument("--report", action="store_true", help="only rewrite docs/benchmarks.md")
    parser.add_argument("--cpu", help="name another CPU's run: its own result and section")
    parser.add_argument("--child-translate", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--beam", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--child-out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child_translate:
        child_translate(args.child_translate, args.beam, args.child_out)
        return
    result_path, begin, end = variant(RESULT, BEGIN, END, args.cpu)
    if not args.report:
        result = run(args)
        for search, row in result["translate"].items():  # outputs stay in the work directory
            for name in ("heedful", "eole"):
                path = WORK / f"hyps-{name}-{search}.txt"
                path.write_text("\n".join(row[name].pop("hypotheses")) + "\n", encoding="utf-8")
        result_path.parent.mkdir(parents=True, exist_ok=True)
        result_path.write_text(json.dumps(result, indent=2) + "\n")
    result = json.loads(result_path.read_text())
    section = report(result, args.cpu, begin, end)
    print(section)
    write_section(REPORT, begin, end, section)
    print(f"wrote {result_path} and {REPORT}")


if __name__ == "__main__":
    main()
