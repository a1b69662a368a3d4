"""The evaluation's JSONL files in the results folder: answers and scores, one file per document."""

import json
from pathlib import Path


def write_jsonl(path: Path, rows) -> None:
    """``rows`` as JSON lines at ``path``, written to a temporary file first and then moved into place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    with tmp.open("w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False, default=str) + "\n")
    tmp.replace(path)


def read_jsonl_folder(folder: Path) -> list[dict]:
    """The rows of every ``*.jsonl`` file in ``folder``, the files in name order."""
    rows: list[dict] = []
    for path in sorted(folder.glob("*.jsonl")):
        with path.open(encoding="utf-8") as fh:
            rows.extend(json.loads(line) for line in fh if line.strip())
    return rows
