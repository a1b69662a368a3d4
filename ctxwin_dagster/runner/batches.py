"""What ``ctxwin run`` launches: :class:`Planned` runs, each carrying one document or a batch of
documents (a range of the documents' partitions; see :mod:`ctxwin_dagster.defs.batches`).

A batch is a run over a *range* of partition keys, so its documents must follow one another in
the partitions' order (the order in which the documents were added), and they must need the same
assets. :func:`make_batches` cuts the stale documents into such runs of at most ``size``
documents and, by default, at most ``budget`` bytes of files (:func:`batch_limits`: about two
runs' worth of the folder per worker), so that a long filing runs alone, beside the batches of
short ones, instead of holding up a batch; :func:`launch_order` starts the largest runs first.
The cold run of a folder is a few long ranges, and a document added later joins the others at the end.

A batch that fails names the documents that failed (the step's failure metadata);
:func:`after_failure` gives the runs that follow: the batch's other documents again (their work
is in the caches) and each failed document in a run of its own, so that its failure is its own
partition's.

Example::

    >>> order = {k: i for i, k in enumerate("abcdef")}
    >>> runs = make_batches([Planned(k, None, "new") for k in "abcef"], order, size=2)
    >>> [p.documents for p in runs]
    [['a', 'b'], ['c'], ['e', 'f']]
    >>> sizes = dict(a=10, b=10, c=90, d=10, e=10, f=10)
    >>> runs = make_batches([Planned(k, None, "new", sizes={k: sizes[k]}) for k in "abcdef"], order, size=20, budget=35)
    >>> [p.documents for p in launch_order(runs)]
    [['c'], ['d', 'e', 'f'], ['a', 'b']]
    >>> [p.documents for p in after_failure(Planned.batch([Planned(k, None, "new") for k in "abc"]), {"b"}, order, 20)]
    [['a'], ['c'], ['b']]
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import dagster as dg

__all__ = [
    "RANGE_END_TAG",
    "RANGE_START_TAG",
    "Planned",
    "after_failure",
    "batch_limits",
    "launch_order",
    "make_batches",
]

#: Dagster's run tags of a run over a range of partitions.
RANGE_START_TAG = "dagster/asset_partition_range_start"
RANGE_END_TAG = "dagster/asset_partition_range_end"


@dataclass
class Planned:
    """One run to launch: a document partition, a batch of them, or none (the comparison); the
    assets it materializes and why."""

    partition: str | None  # the (first) document; None: unpartitioned
    selection: set[dg.AssetKey] | None  # None: the whole job
    reason: str
    tags: dict[str, str] = field(default_factory=dict)
    documents: list[str] = field(default_factory=list)  # every document of the run (default: [partition])
    request: str = ""  # the request id (the run's run_key)
    run_id: str = ""  # once the sensor has launched it
    submitted: float = 0.0
    finished: float = 0.0
    status: str = ""
    stage: str = ""
    step: str = ""  # the step the run started last
    log_cursor: str | None = None  # where the run's log was read up to (its warnings are printed)
    steps: int = 1
    steps_done: int = 0
    sizes: dict[str, int] = field(default_factory=dict)  # bytes of each document's file (batches are balanced by them)

    def __post_init__(self) -> None:
        if not self.documents and self.partition is not None:
            self.documents = [self.partition]

    @property
    def name(self) -> str:
        """How the console names the run: its document, or the batch's first and last."""
        from ctxwin_dagster.defs.run_reasons import documents_label

        return documents_label(self.documents) if self.documents else self.partition or ""

    @property
    def partition_for_run(self) -> str | None:
        """The run's single partition key (None for a batch: its range is in its tags)."""
        return self.partition if len(self.documents) <= 1 else None

    @classmethod
    def batch(cls, runs: Sequence[Planned]) -> Planned:
        """One run of the documents of ``runs`` (consecutive partitions, the same assets)."""
        if len(runs) == 1:
            return runs[0]
        first = runs[0]
        from ctxwin_dagster.defs.run_reasons import DOCUMENTS_TAG, REASON_TAG, combined_reason, documents_label

        reason = combined_reason(p.reason for p in runs)
        documents = [d for p in runs for d in p.documents]
        tags = {
            **first.tags,
            RANGE_START_TAG: documents[0],
            RANGE_END_TAG: documents[-1],
            DOCUMENTS_TAG: documents_label(documents)[:200],
        }

        if REASON_TAG in tags:  # the runs' tags, combined as their longer reasons are
            tags[REASON_TAG] = combined_reason(p.tags.get(REASON_TAG, p.reason) for p in runs)[:200]
        sizes = {d: n for p in runs for d, n in p.sizes.items()}
        return cls(first.partition, first.selection, reason, tags, documents=documents, sizes=sizes)

    def single(self, document: str) -> Planned:
        """The run of one of this run's documents alone."""
        from ctxwin_dagster.defs.run_reasons import DOCUMENTS_TAG

        tags = {k: v for k, v in self.tags.items() if k not in (RANGE_START_TAG, RANGE_END_TAG, DOCUMENTS_TAG)}
        return Planned(document, self.selection, self.reason, tags, sizes={document: self.sizes.get(document, 0)})

    @property
    def size(self) -> int:
        """Bytes of the run's document files."""
        return sum(self.sizes.values())


def batch_limits(sizes: Sequence[int], workers: int, most: int, asked: int | None = None) -> tuple[int, float]:
    """(documents, bytes) a run may carry. Asked for a batch size, that many documents; otherwise at
    most ``most`` documents and about ``1 / (2 * workers)`` of the bytes to run, so that every
    worker takes about two runs (a slow batch does not leave the others idle at the end) and a
    document larger than that runs alone. When ``most`` decides, the documents are shared out
    over a number of runs that every worker takes alike: 100 documents for 2 workers make 6 runs
    of 17 or fewer (3 each), not 5 of 20, whose last would run alone on one worker.

    Example::

        >>> batch_limits([10_000] * 100, workers=2, most=20)
        (17, 250000.0)
    """
    if asked is not None:
        return asked, math.inf
    workers = max(1, workers)
    rounds = math.ceil(math.ceil(len(sizes) / most) / workers) if sizes else 1
    per_run = min(most, max(1, math.ceil(len(sizes) / (rounds * workers))))
    return per_run, max(1.0, sum(sizes) / (2 * workers))


def launch_order(runs: Iterable[Planned]) -> list[Planned]:
    """The largest runs first (by bytes; the partitions' order among equals), so the long ones
    do not start last and leave the other workers idle."""
    return sorted(runs, key=lambda p: -p.size)


def make_batches(
    planned: Iterable[Planned], order: Mapping[str, int], size: int, budget: float = math.inf
) -> list[Planned]:
    """``planned`` (one document each) cut into runs of up to ``size`` documents and ``budget``
    bytes (a larger document alone) that follow one another in the partitions' ``order`` and
    need the same assets."""
    runs = sorted(planned, key=lambda p: order.get(p.partition or "", math.inf))
    out: list[Planned] = []
    current: list[Planned] = []
    for p in runs:
        if current and (
            len(current) >= size
            or sum(c.size for c in current) + p.size > budget
            or p.selection != current[-1].selection
            or p.partition not in order
            or order[p.partition or ""] != order.get(current[-1].partition or "", -2) + 1
        ):
            out.append(Planned.batch(current))
            current = []
        current.append(p)
    if current:
        out.append(Planned.batch(current))
    return out


def after_failure(batch: Planned, failed: Iterable[str], order: Mapping[str, int], size: int) -> list[Planned]:
    """The runs that follow a failed batch: its other documents again, in batches of up to
    ``size``, then each failed document alone (every document alone when the failure named none
    of them)."""
    failed = set(failed) & set(batch.documents) or set(batch.documents)
    others = [batch.single(d) for d in batch.documents if d not in failed]
    return make_batches(others, order, size) + [batch.single(d) for d in batch.documents if d in failed]
