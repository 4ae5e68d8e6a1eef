"""The training loop's parts: batches, data order, stopping limits, resuming."""

from dataclasses import replace

import pytest
import torch

from heedful.config import DecoderConfig, ModelConfig, TextEncoderConfig, TrainConfig
from heedful.data.batching import Batch, InMemoryPairs
from heedful.data.stream import BatchStream
from heedful.models.build import build_model
from heedful.training.loop import train
from heedful.training.state import TrainState


def data(n=40):
    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(2, 9, (n,), generator=g).tolist()
    src = [torch.randint(4, 12, (length,), generator=g).tolist() for length in lengths]
    return InMemoryPairs(src, [list(reversed(s)) for s in src])


def test_batch_stream_resumes_at_any_position():
    pairs = data()
    straight = BatchStream(pairs, 40, seed=5)
    batches = [straight.next().batch for _ in range(25)]  # crosses epoch boundaries
    resumed = BatchStream(pairs, 40, seed=5, epoch=straight.epoch, batch=straight.batch)
    again = BatchStream(pairs, 40, seed=5)
    for _ in range(11):
        again.next()
    tail = BatchStream(pairs, 40, seed=5, epoch=again.epoch, batch=again.batch)
    for i in range(11, 25):
        assert all(torch.equal(a, b) for a, b in zip(tail.next().batch, batches[i]))
    assert resumed.epochs_done() >= 1


MODEL = ModelConfig(
    d_model=16,
    num_heads=2,
    d_ff=32,
    encoder=TextEncoderConfig(layers=1),
    decoder=DecoderConfig(layers=1),
)


def test_the_stream_gives_named_batches():
    assert isinstance(BatchStream(data(), 40, seed=5).next().batch, Batch)


def test_max_epochs_stops_after_exactly_one_pass():
    pairs = data()
    model = build_model(MODEL, 12, 12)
    per_epoch = len(BatchStream(pairs, 60, seed=1))
    result = train(
        model,
        pairs,
        TrainConfig(batch_tokens=60, max_epochs=1, max_steps=1000, seed=1),
        progress=False,
    )
    assert result.stopped_by == "max_epochs" and result.steps == per_epoch


def test_bf16_is_automatic_only_on_a_gpu():
    from heedful.training.loop import use_bf16

    assert use_bf16(None, "cpu") is False
    assert use_bf16(True, "cpu") is True and use_bf16(False, "cpu") is False
    if torch.cuda.is_available():
        assert use_bf16(None, "cuda") == torch.cuda.is_bf16_supported()


@pytest.mark.parametrize(("setting", "line"), [(None, "default on this GPU"), (True, "train.bf16")])
def test_a_run_in_bfloat16_says_so_and_why(monkeypatch, setting, line):
    import heedful.training.loop as loop

    real = loop.use_bf16  # the default as on a GPU with bfloat16, the run on the CPU
    monkeypatch.setattr(loop, "use_bf16", lambda s, device: True if s is None else real(s, device))
    lines: list[str] = []
    config = TrainConfig(batch_tokens=60, max_steps=2, eval_every=2, bf16=setting)
    train(build_model(MODEL, 12, 12), data(), config, progress=False, echo=lines.append)
    said = [text for text in lines if text.startswith("precision:")]
    assert len(said) == 1 and "bfloat16 autocast" in said[0] and line in said[0]
    lines.clear()
    config = replace(config, bf16=False)
    train(build_model(MODEL, 12, 12), data(), config, progress=False, echo=lines.append)
    assert not any(text.startswith("precision:") for text in lines)


@pytest.mark.parametrize("missing", [None, "this CPU has no bfloat16 units (AMX or AVX512-BF16)"])
def test_bfloat16_on_a_cpu_without_bf16_units_is_warned_in_the_precision_line(monkeypatch, missing):
    import heedful.training.loop as loop

    monkeypatch.setattr(loop, "bf16_missing", lambda: missing)
    lines: list[str] = []
    config = TrainConfig(batch_tokens=60, max_steps=1, eval_every=1, bf16=True)
    train(build_model(MODEL, 12, 12), data(), config, progress=False, echo=lines.append)
    (said,) = [text for text in lines if text.startswith("precision:")]
    assert ("WARNING" in said) is (missing is not None)
    if missing:
        assert missing in said


@pytest.mark.parametrize(
    ("metric", "values", "stopped_by", "steps"),
    [
        ("loss", [3.0, 2.0, 1.0, 0.5], "max_steps", 8),  # lower loss is better: never stops
        ("loss", [1.0, 2.0, 3.0, 4.0], "patience", 6),  # two validations without improving
        ("bleu", [3.0, 2.0, 1.0, 0.5], "patience", 6),  # higher BLEU is better
    ],
)
def test_patience_counts_validations_without_improvement(metric, values, stopped_by, steps):
    pairs = data()
    scores = iter(values)
    config = TrainConfig(
        batch_tokens=60, max_steps=8, eval_every=2, early_stopping_metric=metric, patience=2
    )
    result = train(
        build_model(MODEL, 12, 12),
        pairs,
        config,
        validate=lambda _: {metric: next(scores)},
        progress=False,
    )
    assert (result.stopped_by, result.steps) == (stopped_by, steps)
    assert [m["best"] for m in result.history][:2] == [True, stopped_by == "max_steps"]


SHARED = replace(MODEL, encoder=TextEncoderConfig(layers=1, share_embeddings=True))


@pytest.mark.parametrize("model", [MODEL, SHARED], ids=["own-tables", "shared-embeddings"])
def test_a_run_resumed_from_its_state_continues_bit_for_bit(tmp_path, model):
    """Dropout draws from the RNG and Adam keeps moments: both must come back exactly, also
    for a table two sides share (one Parameter, one set of moments)."""
    pairs = data()
    config = TrainConfig(batch_tokens=60, max_steps=8, eval_every=4, warmup_steps=3, seed=2)
    torch.manual_seed(0)
    straight = build_model(model, 12, 12)  # dropout 0.1
    start = {k: v.clone() for k, v in straight.state_dict().items()}
    train(straight, pairs, config, progress=False)

    half = build_model(model, 12, 12)
    half.load_state_dict(start)
    saved = {}

    def save(state, metrics):
        state.save(tmp_path)
        saved.update({k: v.clone() for k, v in half.state_dict().items()})

    train(half, pairs, replace(config, max_steps=4), progress=False, save=save)
    torch.rand(10)  # a new process: the generator is elsewhere
    resumed = build_model(model, 12, 12)
    resumed.load_state_dict(saved)
    state = TrainState.resume(tmp_path, resumed, config)
    assert state.progress.step == 4
    train(resumed, pairs, config, progress=False, state=state)
    for name, value in straight.state_dict().items():
        assert torch.equal(value, resumed.state_dict()[name]), name


def test_a_linear_schedule_run_resumed_mid_way_continues_bit_for_bit(tmp_path):
    """The linear schedule's line is drawn from the budget, which a resume must carry: the
    state saved at step 4 of an 8-step run, resumed, ends on the same weights."""
    pairs = data()
    config = TrainConfig(
        batch_tokens=60,
        max_steps=8,
        eval_every=4,
        warmup_steps=2,
        seed=2,
        schedule="linear",
        log_every=1,
    )
    torch.manual_seed(0)
    straight = build_model(MODEL, 12, 12)
    start = {k: v.clone() for k, v in straight.state_dict().items()}
    saved, rates = {}, []

    def save(state, metrics):
        if state.progress.step == 4:
            state.save(tmp_path)
            saved.update({k: v.clone() for k, v in straight.state_dict().items()})

    train(straight, pairs, config, progress=False, save=save, log=rates.append)
    lrs = [r["lr"] for r in rates]
    assert lrs[-1] == 0.0 and max(lrs) == pytest.approx(config.lr)
    torch.rand(10)
    resumed = build_model(MODEL, 12, 12)
    resumed.load_state_dict(saved)
    state = TrainState.resume(tmp_path, resumed, config)
    assert state.progress.step == 4 and any(not torch.equal(v, start[k]) for k, v in saved.items())
    train(resumed, pairs, config, progress=False, state=state)
    for name, value in straight.state_dict().items():
        assert torch.equal(value, resumed.state_dict()[name]), name


def test_the_final_checkpoint_is_validated_and_can_be_best():
    """A limit that stops between validations still validates the last step: with a schedule
    that decays to the budget's end, that checkpoint is often the best, and `best` must be able
    to point at it."""
    scores = iter([1.0, 2.0, 3.0])
    saved = []
    result = train(
        build_model(MODEL, 12, 12),
        data(),
        TrainConfig(batch_tokens=60, max_steps=7, eval_every=3),
        validate=lambda _: {"bleu": next(scores)},
        save=lambda state, metrics: saved.append((state.progress.step, metrics)),
        progress=False,
    )
    assert result.stopped_by == "max_steps"
    assert [m["step"] for m in result.history] == [3, 6, 7]
    assert [(step, m is not None and m["best"]) for step, m in saved] == [
        (3, True),
        (6, True),
        (7, True),
    ]


def test_max_time_keeps_room_for_the_final_validation(monkeypatch):
    """The budget counts validation, so a max_time run stops early by as long as its latest
    validation took: the final one then ends within the budget (fake clock: a step costs 1 s,
    a validation 10 s)."""
    import heedful.training.loop as training

    clock = [0.0]

    def perf_counter():
        clock[0] += 1.0  # one reading per training step, one after each validation
        return clock[0]

    def validate(_):
        clock[0] += 10.0
        return {"bleu": clock[0]}

    monkeypatch.setattr(training.time, "perf_counter", perf_counter)
    config = TrainConfig(batch_tokens=60, max_steps=1000, eval_every=5, max_time=45.0)
    result = train(build_model(MODEL, 12, 12), data(), config, validate=validate, progress=False)
    assert result.stopped_by == "max_time" and result.steps % config.eval_every != 0
    assert result.history[-1]["step"] == result.steps  # the last step was validated
    assert clock[0] <= config.max_time + 1.0  # ...and that validation ended within the budget


def test_automatic_threads_are_looked_at_every_step_and_a_change_is_told(monkeypatch):
    """train() asks cpu.FreeCores after each step when the threads are heedful's to choose
    (train.threads None) and each batch runs whole on them (train.pieces 1), and says when
    their count changes; a pinned count is never asked, nor are pieces side by side, which
    keep every core (training/streams.py)."""
    asked = []

    class Watcher:
        cores = [0, 1]

        def look(self):
            asked.append(len(asked))
            return (1, 0.9) if len(asked) == 2 else None

    def follow(threads, environ=None):
        return Watcher() if threads is None else None

    monkeypatch.setattr("heedful.training.loop.FreeCores.follow", follow)
    lines = []
    config = TrainConfig(batch_tokens=60, max_steps=4, seed=1, pieces=1)
    train(build_model(MODEL, 12, 12), data(), config, progress=False, echo=lines.append)
    assert len(asked) == 4
    assert [line for line in lines if line.startswith("threads:")] == [
        "threads: 1, as other processes use 0.9 of 2 cores"
    ]
    asked.clear()
    train(build_model(MODEL, 12, 12), data(), replace(config, threads=1), progress=False)
    assert asked == []
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:  # two pieces side by side
        train(build_model(MODEL, 12, 12), data(), replace(config, pieces=2), progress=False)
    finally:
        torch.set_num_threads(threads)
    assert asked == []


def test_the_demo_pins_the_threads_it_starts_with():
    """The tour's models must not depend on the machine's load (issue 28): the demo's training
    never lets its thread count follow the free cores."""
    from heedful.demo.run import DEMO_TRAIN
    from heedful.demo.training import budget

    assert DEMO_TRAIN.threads is None
    assert budget(DEMO_TRAIN, None, None, seed=0).threads == torch.get_num_threads()
