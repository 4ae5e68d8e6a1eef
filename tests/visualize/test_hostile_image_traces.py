"""Hostile image traces: an image model's trace file (visualize/trace.py) whose `image`
is damaged is refused by Trace.load, naming the file and the field, before a viewer puts the
picture into a page (heedful.visualize.trace_check._check_image).

The valid base is the trace of a tiny untrained ViT captioner (4 × 4 patches, so S = 16);
each case damages one thing. docs/hostile-inputs.md counts these CASES.
"""

from __future__ import annotations

import copy
import json

import pytest
from image_models import image_model_dir, picture

from heedful.inference.translator import Translator
from heedful.visualize.trace import Trace, build_trace
from heedful.visualize.trace_check import MAX_IMAGE_URI_CHARS

PNG_URI = "data:image/png;base64,"


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> dict:
    model_dir = image_model_dir(tmp_path_factory.mktemp("vit") / "model", "vit")
    return build_trace(Translator.load(model_dir), picture(seed=4)).to_dict()


def edit(change):
    """The base trace's file after `change(data["image"])` (which edits it in place)."""

    def make(base):
        data = copy.deepcopy(base)
        change(data["image"])
        return json.dumps(data).encode("utf-8")

    return make


def set_image(value):
    def make(base):
        data = copy.deepcopy(base)
        data["image"] = value
        return json.dumps(data).encode("utf-8")

    return make


def put(key, value):
    return edit(lambda image: image.__setitem__(key, value))


def rollout(change):
    return edit(lambda image: change(image["rollout"]))


def case(id_, make, fragments):
    return pytest.param(make, fragments, id=id_)


URI = ["image.data_uri", "expected a base64 PNG or JPEG data URI"]
CASES = [
    case("row0-truncated", lambda b: json.dumps(b).encode()[:-40], ["not valid JSON"]),
    case("row0-image-not-object", set_image(PNG_URI + "AAAA"), ["image: expected an object"]),
    case("image-list", set_image([1, 2]), ["image: expected an object"]),
    case("image-extra-key", put("src", "x.png"), ["image", "exactly the keys"]),
    case("image-missing-rollout", edit(lambda i: i.pop("rollout")), ["exactly the keys"]),
    case("row0-uri-not-text", put("data_uri", 5), ["image.data_uri: expected text"]),
    case("row0-uri-empty", put("data_uri", ""), URI),
    case("uri-empty-payload", put("data_uri", PNG_URI), URI),
    case("uri-http-url", put("data_uri", "https://example.com/cat.png"), URI),
    case("uri-file-url", put("data_uri", "file:///etc/passwd"), URI),
    case("uri-javascript", put("data_uri", "javascript:alert(1)"), URI),
    case("uri-svg-with-script", put("data_uri", "data:image/svg+xml;base64,PHN2Zz4="), URI),
    case("uri-text-html", put("data_uri", "data:text/html;base64,PGI+"), URI),
    case("uri-markup-breakout", put("data_uri", PNG_URI + "AAAA</script><script>x()"), URI),
    case("row0-uri-wrong-encoding", put("data_uri", "data:image/png;charset=utf-8,%89PNG"), URI),
    case("row0-uri-huge", put("data_uri", PNG_URI + "A" * MAX_IMAGE_URI_CHARS),
         ["image.data_uri", "over the 2,097,152"]),
    case("grid-not-list", put("grid", "4x4"), ["image.grid: expected [rows, columns]"]),
    case("grid-three-numbers", put("grid", [4, 4, 1]), ["image.grid", "expected [rows, columns]"]),
    case("grid-wrong-product", put("grid", [4, 5]), ["image.grid", "4 × 5", "16 (S)"]),
    case("grid-transposed-too-big", put("grid", [16, 16]), ["image.grid", "16 × 16"]),
    case("grid-zero", put("grid", [0, 16]), ["image.grid[0]", "from 1"]),
    case("grid-float", put("grid", [4.0, 4]), ["image.grid[0]: expected a whole number"]),
    case("grid-bool", put("grid", [4, True]), ["image.grid[1]: expected a whole number"]),
    case("grid-huge", put("grid", [1 << 40, 1]), ["image.grid[0]", "from 1 to 4,096"]),
    case("rollout-rows-short", rollout(lambda r: r.pop()), ["image.rollout", "16 lists (S)"]),
    case("rollout-row-short", rollout(lambda r: r[3].pop()), ["image.rollout[3]", "numbers (S)"]),
    case("rollout-not-list", put("rollout", {"0": 1}), ["image.rollout: expected a list"]),
    case("row0-rollout-nan", rollout(lambda r: r[0].__setitem__(0, float("nan"))),
         ["NaN", "not a number JSON allows"]),
    case("row0-rollout-infinite", rollout(lambda r: r[0].__setitem__(0, float("inf"))),
         ["Infinity", "not a number JSON allows"]),
    case("rollout-over-one", rollout(lambda r: r[1].__setitem__(2, 1.5)),
         ["image.rollout[1][2]", "from 0 to 1"]),
    case("rollout-negative", rollout(lambda r: r[1].__setitem__(2, -0.1)),
         ["image.rollout[1][2]", "from 0 to 1"]),
    case("rollout-text", rollout(lambda r: r[0].__setitem__(0, "0.5")),
         ["image.rollout[0][0]: expected a number"]),
]  # fmt: skip


@pytest.mark.parametrize("make, fragments", CASES)
def test_a_hostile_image_trace_is_refused_by_name(tmp_path, base, make, fragments):
    path = tmp_path / "trace.json"
    path.write_bytes(make(base))
    with pytest.raises(ValueError) as caught:
        Trace.load(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: ")
    for fragment in fragments:
        assert fragment in message, message


def test_the_base_loads(tmp_path, base):
    """The checks refuse nothing an image trace of ours holds (so the cases above test them)."""
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(base), encoding="utf-8")
    assert Trace.load(path).to_dict() == base
