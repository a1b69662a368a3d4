"""The types of JSON-ready values: what the project writes to result files, Dagster metadata and
HTTP bodies, and reads back.

``JSONValue`` is what :func:`json.dumps` takes and :func:`json.loads` gives; ``JSONObject`` is a
JSON object. Use them in place of ``dict[str, Any]`` wherever a value is JSON; keep ``Any`` for
the objects of untyped libraries.

Example::

    >>> import json
    >>> row: JSONObject = {"doc_id": "d", "spans": [[0, 5]], "score": 0.5, "exact": True}
    >>> json.loads(json.dumps(row)) == row
    True
"""

from __future__ import annotations

from typing import TypeAlias

__all__ = ["JSONObject", "JSONScalar", "JSONValue"]

JSONScalar: TypeAlias = str | int | float | bool | None
JSONValue: TypeAlias = "JSONScalar | list[JSONValue] | dict[str, JSONValue]"
JSONObject: TypeAlias = "dict[str, JSONValue]"
