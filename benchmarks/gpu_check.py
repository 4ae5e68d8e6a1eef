"""GPU check: one training step on the GPU against the CPU, then training and decoding rates.

    bash benchmarks/gpu_check.sh          # on a machine with an NVIDIA GPU, under 5 minutes

1. Correctness: the issue's Transformer (3+3 layers, d_model 256, 4 heads, d_ff 1024), dropout
   off, one Adam step on one batch, on the CPU and on the GPU in float32 (TF32 off): the loss
   and every updated parameter must agree (relative error < 1e-4 for the loss, max abs diff of
   parameters < 1e-5: Adam's first step moves each weight by about lr). Then the same step
   under bf16 autocast: the loss within 2% of float32.
2. Fused attention: the padded-mask and causal calls the model makes run under the flash and
   memory-efficient SDPA backends alone (torch raises if no fused kernel can serve them).
3. Resume: the CUDA generators' states round trip through the training state (rng_state,
   restore_rng), so a resumed run draws the same dropout masks on the GPU.
4. Rates: training target tokens/s with bf16 autocast on a GPU (dates task: needs no download), and
   greedy / beam-5 decoding sentences/s of the model it trained.
Prints one JSON object; exits non-zero if a check fails. `--device cpu --steps 60` runs the
same code on the CPU (the comparisons then compare the CPU with itself): a dry run of the script.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import torch

from heedful.config import DecoderConfig, ModelConfig, TextEncoderConfig, TrainConfig
from heedful.data.batching import InMemoryPairs, collate
from heedful.data.tokenizers import CharTokenizer
from heedful.inference.translator import Translator
from heedful.models.build import build_model
from heedful.tasks.dates import generate_dates
from heedful.training.loop import sequence_loss, train
from heedful.training.state import make_optimizer, restore_rng, rng_state

MODEL = ModelConfig(
    d_model=256,
    num_heads=4,
    d_ff=1024,
    dropout=0.0,
    norm="pre",
    encoder=TextEncoderConfig(layers=3),
    decoder=DecoderConfig(layers=3, tie_embeddings=True),
)


def one_step(model_state, vocab, batch, device, bf16: bool) -> tuple[float, dict]:
    model = build_model(MODEL, vocab, vocab)
    model.load_state_dict(model_state)
    model.to(device).train()
    optimizer = make_optimizer(model, TrainConfig(lr=1e-3))
    src, tgt_in, tgt_out = (t.to(device) for t in batch)
    context = (
        torch.autocast(device.type, torch.bfloat16)
        if bf16
        else torch.autocast(device.type, enabled=False)
    )
    with context:
        logits = model(src, tgt_in).logits
        loss = sequence_loss(logits, tgt_out, 0.1)
    loss.backward()
    optimizer.step()
    return loss.item(), {k: v.detach().cpu() for k, v in model.state_dict().items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--steps", type=int, default=300, help="training steps for the rate")
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        print("no CUDA device: this check runs on a GPU machine", file=sys.stderr)
        return 2
    cuda = torch.device(args.device)
    sync = torch.cuda.synchronize if cuda.type == "cuda" else (lambda: None)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    pairs = generate_dates(20_000, seed=1)
    tok = CharTokenizer.train([s for s, _ in pairs] + [t for _, t in pairs])
    vocab = len(tok)
    src_ids = [tok.encode(s) for s, _ in pairs]
    tgt_ids = [tok.encode(t) for _, t in pairs]
    name = torch.cuda.get_device_name() if cuda.type == "cuda" else "cpu"
    report: dict = {"device": name, "torch": torch.__version__}
    failures = []

    # 1. one step, CPU vs GPU
    torch.manual_seed(0)
    state = build_model(MODEL, vocab, vocab).state_dict()
    batch = collate(src_ids[:64], tgt_ids[:64])
    cpu_loss, cpu_params = one_step(state, vocab, batch, torch.device("cpu"), bf16=False)
    gpu_loss, gpu_params = one_step(state, vocab, batch, cuda, bf16=False)
    bf16_loss, _ = one_step(state, vocab, batch, cuda, bf16=True)
    loss_err = abs(gpu_loss - cpu_loss) / abs(cpu_loss)
    param_diff = max((gpu_params[k] - cpu_params[k]).abs().max().item() for k in cpu_params)
    bf16_err = abs(bf16_loss - cpu_loss) / abs(cpu_loss)
    report["step"] = {"cpu_loss": cpu_loss, "gpu_loss": gpu_loss, "loss_rel_err": loss_err,
                      "max_param_diff": param_diff, "bf16_loss": bf16_loss,
                      "bf16_rel_err": bf16_err}  # fmt: skip
    if not (loss_err < 1e-4 and param_diff < 1e-5):
        failures.append("float32 step differs between CPU and GPU")
    if not bf16_err < 0.02:
        failures.append("bf16 loss differs from float32 by more than 2%")

    # 2. fused attention backends serve the model's calls
    from torch.nn.attention import SDPBackend, sdpa_kernel

    model = build_model(MODEL, vocab, vocab).to(cuda).train()
    src, tgt_in, _ = (t.to(cuda) for t in collate(src_ids[:64], tgt_ids[:64]))
    try:
        with (
            torch.autocast(cuda.type, torch.bfloat16),
            sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]),
        ):
            model(src, tgt_in).logits.float().sum().backward()
        report["fused_attention"] = True
    except RuntimeError as e:
        report["fused_attention"] = f"no fused kernel: {e}"
        failures.append("the fused SDPA backends do not serve the model's attention")

    # 3. the CUDA generators round trip (resume on a GPU stays exact)
    if cuda.type == "cuda":
        saved = rng_state()
        expected = torch.rand(4, device=cuda)
        torch.rand(100, device=cuda)
        restore_rng(saved)
        report["cuda_rng_round_trip"] = "rng.cuda.0" in saved and bool(
            torch.equal(torch.rand(4, device=cuda), expected)
        )
        if not report["cuda_rng_round_trip"]:
            failures.append("the CUDA generators' states do not round trip")

    # 4. rates
    torch.manual_seed(1)
    model = build_model(MODEL, vocab, vocab)
    steps = args.steps
    every = max(1, steps // 6)
    # bf16 on the GPU; float32 in a CPU dry run (a CPU without bf16 units emulates it slowly)
    config = TrainConfig(batch_tokens=12000, max_steps=steps, bf16=cuda.type == "cuda", lr=1e-3,
                         warmup_steps=100, eval_every=10**9, log_every=every)  # fmt: skip
    records = []
    train(model.to(cuda), InMemoryPairs(src_ids, tgt_ids), config, progress=False,
          log=records.append, device=cuda)  # fmt: skip
    (a, b) = records[1], records[-1]  # leave the first sixth of the steps (warm-up) out
    report["train_tokens_per_s"] = (b["tokens"] - a["tokens"]) / (b["seconds"] - a["seconds"])
    translator = Translator(model, tok, tok, device=cuda)
    texts = [s for s, _ in generate_dates(1000, seed=2)]
    for beams in (1, 5):
        translator.translate(texts[:64], num_beams=beams)  # warm-up
        sync()
        start = time.perf_counter()
        out = translator.translate(texts, num_beams=beams, batch_size=64)
        sync()
        rate = len(texts) / (time.perf_counter() - start)
        report[f"decode_beam{beams}_sentences_per_s"] = rate
        exact = sum(o.text == t for o, (_, t) in zip(out, generate_dates(1000, seed=2)))
        report[f"decode_beam{beams}_exact_match"] = exact / len(texts)
    report["failures"] = failures
    print(json.dumps(report, indent=2))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
