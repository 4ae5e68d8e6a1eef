"""The attention filter over training (issue 28, item 3; training/snapshots.py): `heedful train`
with train.snapshot_sentences traces the first validation inputs before the first step and at
every validation into RUN_DIR/snapshots.json, the last of them the trace the trained model
gives; a resumed run takes up the file where it resumes; the file stays bounded; the settings
are checked by name."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from test_experiment import corpus, write_config

from heedful.cli import main
from heedful.config import ConfigError, load_config
from heedful.inference.translator import Translator
from heedful.models.encoder_decoder import EncoderDecoder
from heedful.training.snapshots import scores_of, thinned
from heedful.visualize.snapshots import read_snapshots
from heedful.visualize.trace import build_trace

SNAPSHOTS = ["--set", "train.snapshot_sentences=2", "--no-progress"]


def train(config, run_dir, *options: str):
    result = CliRunner().invoke(main, ["train", str(config), "--run-dir", str(run_dir), *options])
    assert result.exit_code == 0, result.output
    return result


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A 12-step run validating every 4 steps, its first two validation inputs traced."""
    tmp = tmp_path_factory.mktemp("snapshots")
    config = write_config(tmp, corpus(tmp), steps=12)
    train(config, tmp / "run", *SNAPSHOTS)
    return config, tmp / "run"


def test_the_inputs_are_traced_before_training_and_at_every_validation(trained):
    config, run = trained
    data = read_snapshots(run)
    sources = (config.parent / "data" / "valid.src").read_text(encoding="utf-8").splitlines()
    assert data["inputs"] == sources[:2]
    assert [s["step"] for s in data["snapshots"]] == [0, 4, 8, 12]
    assert data["snapshots"][0]["scores"] == {}  # before the first step: no validation
    log = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    validations = {r["step"]: r for r in log if r.get("event") == "validation"}
    for s in data["snapshots"][1:]:
        assert s["scores"] == scores_of(validations[s["step"]]) and "bleu" in s["scores"]
    for snapshot in data["snapshots"]:
        assert [trace["source"] for trace in snapshot["traces"]] == data["inputs"]


def test_training_keeps_its_dropout_on_through_validations_and_snapshots(tmp_path, monkeypatch):
    """Every training step runs in training mode: a snapshot's Translator (which puts its
    model in eval mode) once left the model in eval mode after the first validation, and
    training went on without dropout."""
    modes = []
    forward = EncoderDecoder.forward

    def counted(self, *args, **kwargs):
        if torch.is_grad_enabled():  # a training step's forward, not a search's
            modes.append(self.training)
        return forward(self, *args, **kwargs)

    monkeypatch.setattr(EncoderDecoder, "forward", counted)
    config = write_config(tmp_path, corpus(tmp_path), steps=12)
    train(config, tmp_path / "run", *SNAPSHOTS)
    assert len(read_snapshots(tmp_path / "run")["snapshots"]) == 4  # validations did run
    assert modes == [True] * 12


def test_the_last_snapshot_is_the_trained_models_trace(trained):
    _, run = trained
    data = read_snapshots(run)
    translator = Translator.load(run / "latest")
    for j, (source, last) in enumerate(zip(data["inputs"], data["snapshots"][-1]["traces"])):
        trace = build_trace(translator, source).to_dict()
        assert last["hypotheses"][0]["tokens"] == trace["hypotheses"][0]["tokens"]
        for kind in ("cross_attention", "decoder_self_attention"):
            expected = np.asarray(trace["hypotheses"][0][kind], dtype=np.float64)
            got = np.asarray(last["hypotheses"][0][kind], dtype=np.float64)
            np.testing.assert_allclose(got, expected, rtol=0, atol=2e-5)
        enc = np.asarray(trace["encoder_self_attention"], dtype=np.float64)
        np.testing.assert_allclose(last["encoder_self_attention"], enc, rtol=0, atol=2e-5)
        assert last["internals"]["block"] is None  # the block tab is not kept over training
        untrained = np.asarray(data["snapshots"][0]["traces"][j]["encoder_self_attention"])
        assert np.abs(untrained - enc).max() > 1e-3  # step 0's is not the trained model's


def test_a_resumed_run_takes_up_the_file_where_it_resumes(trained, tmp_path):
    """Resumed at step 8 of a file that reaches 12, the snapshots after 8 are taken again, not
    kept twice (steps must rise, or the file is refused)."""
    import os
    import shutil

    config, run = trained
    copy = tmp_path / "run"
    shutil.copytree(run, copy, symlinks=True)
    os.replace(copy / "latest", copy / "latest.old")
    os.symlink("checkpoints/step-00000008", copy / "latest")
    (copy / "latest.old").unlink()
    train(config, copy, *SNAPSHOTS, "--set", "train.max_steps=16")
    assert [s["step"] for s in read_snapshots(copy)["snapshots"]] == [0, 4, 8, 12, 16]


def test_a_damaged_file_is_begun_anew_on_resume(trained, tmp_path):
    import shutil

    config, run = trained
    copy = tmp_path / "run"
    shutil.copytree(run, copy, symlinks=True)
    (copy / "snapshots.json").write_bytes(b'{"format": "heedful-snap')
    result = train(config, copy, *SNAPSHOTS, "--set", "train.max_steps=16")
    assert "snapshots.json: not valid JSON" in result.output
    assert "the snapshots begin anew from step 12" in result.output
    assert [s["step"] for s in read_snapshots(copy)["snapshots"]] == [16]


def test_force_starts_the_snapshots_over(trained, tmp_path):
    """snapshots.json is a run directory's own file: --force deletes it with the rest."""
    import shutil

    config, run = trained
    copy = tmp_path / "run"
    shutil.copytree(run, copy, symlinks=True)
    train(config, copy, *SNAPSHOTS, "--force", "--set", "train.max_steps=4")
    assert [s["step"] for s in read_snapshots(copy)["snapshots"]] == [0, 4]


def test_without_the_setting_there_are_no_snapshots(tmp_path):
    config = write_config(tmp_path, corpus(tmp_path), steps=4)
    train(config, tmp_path / "run", "--no-progress")
    assert not (tmp_path / "run" / "snapshots.json").exists()


def kept_steps(steps, keep: int) -> list[int]:
    snapshots: list[dict] = []
    for step in steps:
        snapshots = thinned([*snapshots, {"step": step}], keep)
    return [s["step"] for s in snapshots]


def test_snapshots_are_kept_while_there_is_room_and_then_thinned():
    assert kept_steps(range(0, 50, 10), 5) == [0, 10, 20, 30, 40]
    assert kept_steps(range(0, 60, 10), 5) == [0, 20, 30, 40, 50]  # the first of the ties goes
    assert kept_steps(range(0, 100, 10), 2) == [0, 90]  # the first and the latest always


@pytest.mark.parametrize(("count", "keep"), [(101, 5), (101, 20), (400, 20), (400, 50)])
def test_a_long_run_keeps_its_steps_about_evenly_spread(count, keep):
    steps = kept_steps(range(0, 10 * count, 10), keep)
    assert len(steps) == keep and steps[0] == 0 and steps[-1] == 10 * (count - 1)
    gaps = np.diff(steps[:-1])  # the latest may follow its neighbour closely
    assert gaps.max() <= 3 * gaps.min(), steps


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("train.snapshot_sentences=5", "train.snapshot_sentences: must be from 0 to 4, got 5"),
        ("train.snapshot_sentences=-1", "train.snapshot_sentences: must be from 0 to 4, got -1"),
        ("train.snapshot_validations=1", "train.snapshot_validations: must be from 2 to 50"),
        ("train.snapshot_validations=51", "train.snapshot_validations: must be from 2 to 50"),
        ("train.snapshot_sentences=yes", "train.snapshot_sentences"),
    ],
)
def test_the_settings_are_checked_by_name(override, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        load_config(None, [override])


def test_pictures_read_from_a_feature_cache_cannot_be_traced():
    overrides = ["model.encoder=cnn", "model.freeze_encoder=true", "data.feature_cache=cache"]
    overrides.append("train.snapshot_sentences=1")
    with pytest.raises(ConfigError, match="with data.feature_cache the model trains on cached"):
        load_config(None, overrides)
