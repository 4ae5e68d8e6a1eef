"""The request field that names attention heads (schema.py declares /translate's mask_heads with
it): fields.py's kinds hold text, numbers and files; this one holds heads as `heedful heads` and
inference/head_names.py spell them, kind:layer[:head] counted from 1 (cross:2:1; cross:2 for every
head of the layer), and reads them into Heads. Whether the model has them is the plan's to
check (service.py), once the model answering the request is known.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from heedful.inference.head_names import KINDS, Head, parse_heads
from heedful.server.fields import shown
from heedful.server.limits import ApiError

NUMBER = r"[1-9][0-9]{0,5}"  # from 1, no leading zero, at most 6 digits (as parse_heads reads)
HEAD = f"({'|'.join(KINDS)}):{NUMBER}(:{NUMBER})?"
MAX_HEADS = 64  # heads one request may switch off


@dataclass(frozen=True)
class Heads:
    """Heads to switch off: a list of kind:layer[:head], or one text of them separated by
    commas (a form's or a query string's way); absent or empty, none."""

    name: str
    description: str | None = None
    max_items: int = MAX_HEADS

    def schema(self) -> dict:
        text = {"type": "string", "pattern": f"^({HEAD}(,{HEAD}){{0,{self.max_items - 1}}})?$"}
        one = {"type": "string", "pattern": f"^{HEAD}$"}
        listed = {"type": "array", "items": one, "maxItems": self.max_items}
        schema: dict[str, Any] = {"anyOf": [text, listed]}
        return schema | ({"description": self.description} if self.description else {})

    def read(self, data: dict) -> tuple[Head, ...]:
        if self.name not in data:
            return ()
        value = data[self.name]
        if isinstance(value, str):
            items = value.split(",") if value else []
        elif isinstance(value, list):
            items = value
        else:
            raise ApiError(
                400, f"{self.name} must be a list of heads or a text of them, got {shown(value)}"
            )
        if len(items) > self.max_items:
            raise ApiError(
                400, f"{self.name} lists {len(items)} heads; at most {self.max_items} at once"
            )
        for item in items:
            if not isinstance(item, str) or not re.fullmatch(HEAD, item):
                raise ApiError(
                    400,
                    f"{self.name}: {shown(item)} is not a head: kind:layer[:head], the kind one "
                    f"of {', '.join(KINDS)}, the layer and head counted from 1",
                )
        return tuple(parse_heads(",".join(items))) if items else ()
