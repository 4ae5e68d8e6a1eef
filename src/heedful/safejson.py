"""JSON as heedful writes it for others to read: compact, finite, and safe inside <script>.

JSON has no NaN or ±inf (a -inf score marks a masked position), so they become null, as
JavaScript's JSON.stringify writes them. Inside a <script> element the HTML parser ends the
element at the first "</script" and treats "<!--" specially, whatever the JSON means: escaping
"<" (and ">", "&" for good measure) as \\u003c and so on keeps the bytes inert, and JSON.parse
gives back the same strings. U+2028 and U+2029 are escaped because older JavaScript engines
reject them unescaped in source text.
"""

from __future__ import annotations

import json
import math
from typing import Any

_SCRIPT_SAFE = {
    ord("<"): "\\u003c",
    ord(">"): "\\u003e",
    ord("&"): "\\u0026",
    0x2028: "\\u2028",
    0x2029: "\\u2029",
}


def finite(value: Any) -> Any:
    """`value` with NaN and ±inf replaced by None, in dicts, lists and tuples at any depth."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(item) for item in value]
    return value


def dumps(data: Any) -> str:
    """Compact JSON (no spaces: a 100-token trace is megabytes), UTF-8 text as it is, NaN and
    ±inf as null."""
    try:
        return json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except ValueError:  # a -inf score or a NaN: rare, so only then walk the data
        return json.dumps(finite(data), ensure_ascii=False, separators=(",", ":"))


def for_script(data: Any) -> str:
    """dumps(data), safe to embed in an HTML <script> element."""
    return dumps(data).translate(_SCRIPT_SAFE)
