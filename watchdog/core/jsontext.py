"""JSON for every output: strict JSON, never `NaN` or `Infinity` (which are not JSON).

A value that is not a finite number is `null`
(docs/spec.md#6-the-report-json---format-json-schema_version-1).
"""

from __future__ import annotations

import json
import math
from typing import Any


def finite(value: Any) -> Any:
    """`value` with every non-finite float (nan, inf) replaced by None, at any depth."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    return value


def dumps(document: Any, **options: Any) -> str:
    """`json.dumps` that a strict parser always accepts (`allow_nan=False` after `finite`)."""
    return json.dumps(finite(document), allow_nan=False, **options)
