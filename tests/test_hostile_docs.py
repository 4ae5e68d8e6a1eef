"""docs/hostile-inputs.md counts the hostile-input tables; the counts must be the tables'."""

from __future__ import annotations

import re
from pathlib import Path

import test_caption_training_keys as caption_keys
import test_captions as captions
import test_frozen_features as frozen_features
import test_heads as heads
import test_hostile_decoding as decoding
import test_hostile_jsonl as jsonl
import test_hostile_languages as languages
import test_hostile_lines as lines
import test_hostile_model_dirs as model_dirs
import test_hostile_output_dirs as output_dirs
import test_hostile_training as training
import test_recipes as recipes
import test_training_status as training_status
from data import test_hostile_images as images
from data import test_hostile_prepared as prepared
from hf import test_hostile as hf_dirs
from models import test_vision as vision
from server import test_caption_upload as caption_upload
from server import test_decoding_fields as decoding_fields
from server import test_hostile as server
from server import test_hostile_deadlines as deadlines
from server import test_lt_hostile as lt_hostile
from visualize import test_hostile_image_traces as image_traces
from visualize import test_hostile_snapshots as snapshots
from visualize import test_hostile_traces as traces

DOC = Path(__file__).resolve().parent.parent / "docs" / "hostile-inputs.md"
UMASKS = 3  # test_written_files_follow_the_umask's parameters
TRAINING_EXTRA = 2  # the two tests of test_hostile_training.py beside its table
HF_EXTRA = 3  # tests/hf/test_hostile.py: several end tokens (beams 1 and 4), the hub cache's links
SIZE_LIMIT = 1  # test_hostile_traces.py's file over the size limit, beside its table
CAPTION_EXTRA = 4  # test_caption_upload.py: 2 pictures under a memory cap, one decode, a jam
HEADS_EXTRA = 1  # test_heads.py: an RNN given to `heedful heads`, refused by name
SNAPSHOTS_EXTRA = 2  # test_hostile_snapshots.py: a file over the size limit, a run without one


def documented() -> dict[str, int]:
    """{first words of a row of the Count table: its cases column}."""
    rows = re.findall(r"^\| (.+?) \| \**(\d+)\** \|", DOC.read_text(encoding="utf-8"), re.M)
    return {name.strip("*"): int(n) for name, n in rows}


def test_the_documented_counts_are_the_tables():
    counts = documented()
    expected = {
        "`tests/server/test_hostile.py` (`CASES`": len(server.CASES),
        "`tests/test_hostile_training.py` (`CASES`": len(training.CASES),
        "`tests/test_hostile_training.py` (a crash": TRAINING_EXTRA,
        "`tests/test_hostile_model_dirs.py` (`CASES`": len(model_dirs.CASES),
        "`tests/test_hostile_model_dirs.py` (`INPUT_CASES`": 2 * len(model_dirs.INPUT_CASES),
        "`tests/test_hostile_model_dirs.py` (the same": len(model_dirs.SERVED) + UMASKS,
        "`tests/visualize/test_hostile_traces.py` (`CASES`": len(traces.CASES) + SIZE_LIMIT,
        "`tests/hf/test_hostile.py` (`CASES`": len(hf_dirs.CASES),
        "`tests/hf/test_hostile.py` (`ACCEPTED`": len(hf_dirs.ACCEPTED)
        + len(hf_dirs.SERVED)
        + HF_EXTRA,
        "`tests/test_hostile_decoding.py` (`CASES`": len(decoding.CASES),
        "`tests/server/test_decoding_fields.py` (`BAD`": len(decoding_fields.BAD),
        "`tests/test_hostile_jsonl.py` (`CASES`": 2 * len(jsonl.CASES),  # reader and CLI
        "`tests/data/test_hostile_prepared.py` (`CASES`": len(prepared.CASES),
        "`tests/test_hostile_output_dirs.py` (`CASES`": len(output_dirs.CASES),
        "`tests/data/test_hostile_images.py` (`CASES`": len(images.CASES),
        "`tests/test_hostile_languages.py` (`CASES`": len(languages.CASES),
        "`tests/test_captions.py` (`HOSTILE`": len(captions.CASES),  # both layouts
        "`tests/models/test_vision.py` (`BAD_CONFIGS`": len(vision.BAD_CONFIGS),
        "`tests/visualize/test_hostile_image_traces.py` (`CASES`": len(image_traces.CASES),
        "`tests/server/test_caption_upload.py` (`HOSTILE`": len(caption_upload.HOSTILE)
        + len(caption_upload.GOOD)
        + CAPTION_EXTRA,
        "`tests/test_frozen_features.py` (`HOSTILE`": len(frozen_features.HOSTILE),
        "`tests/test_caption_training_keys.py` (`CASES`": len(caption_keys.CASES),
        "`tests/server/test_hostile_deadlines.py` (`CASES`": len(deadlines.CASES),
        "`tests/test_hostile_lines.py` (`CASES`": len(lines.CASES),
        "`tests/test_recipes.py` (`HOSTILE_INIT`": len(recipes.HOSTILE_INIT),
        "`tests/server/test_lt_hostile.py` (`HTML_ROWS`": len(lt_hostile.HTML_ROWS)
        + len(lt_hostile.HTML_REFUSED)
        + len(lt_hostile.FILE_ROWS)
        + len(lt_hostile.BODY_ROWS)
        + len(lt_hostile.DOWNLOAD_ROWS)
        + lt_hostile.EXTRA,
        "`tests/test_heads.py` (`HOSTILE_SPECS`": len(heads.HOSTILE_SPECS)
        + len(heads.HOSTILE_HEADS)
        + len(heads.HOSTILE_FILES)
        + HEADS_EXTRA,
        "`tests/visualize/test_hostile_snapshots.py` (`CASES`": len(snapshots.CASES)
        + SNAPSHOTS_EXTRA,
        "`tests/test_training_status.py` (`HOSTILE`": len(training_status.HOSTILE),
    }
    for start, n in expected.items():
        [row] = [name for name in counts if name.startswith(start)]
        assert counts[row] == n, (row, counts[row], n)
    assert counts["all"] == sum(expected.values())
