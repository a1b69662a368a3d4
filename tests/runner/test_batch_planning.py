"""How ``ctxwin run`` cuts the stale documents into runs (runner/batches.py), without Dagster."""

from __future__ import annotations

import doctest

from ctxwin_dagster.runner import batches
from ctxwin_dagster.runner.batches import Planned, after_failure, batch_limits, launch_order, make_batches

# The sample's seven documents, in the order they were added, with their sizes in bytes.
SAMPLE = {
    "cuad_legacy": 46_358,
    "cuad_paperexchange": 92_875,
    "cuad_todos": 32_321,
    "eu_ai_act": 584_595,
    "squad_1973": 17_817,
    "squad_complexity": 27_559,
    "squad_normans": 25_438,
}
ORDER = {k: i for i, k in enumerate(SAMPLE)}


def _planned(sizes: dict[str, int]) -> list[Planned]:
    return [Planned(k, None, "never materialized", sizes={k: n}) for k, n in sizes.items()]


def test_module_examples() -> None:
    assert doctest.testmod(batches).failed == 0


def test_a_long_document_runs_alone_and_starts_first() -> None:
    size, budget = batch_limits(list(SAMPLE.values()), workers=2, most=20)
    runs = launch_order(make_batches(_planned(SAMPLE), ORDER, size, budget))
    assert [r.documents for r in runs] == [
        ["eu_ai_act"],
        ["cuad_legacy", "cuad_paperexchange", "cuad_todos"],
        ["squad_1973", "squad_complexity", "squad_normans"],
    ]
    assert runs[0].size == SAMPLE["eu_ai_act"]
    assert sum(r.size for r in runs) == sum(SAMPLE.values())


def test_equal_documents_make_about_two_runs_per_worker_of_at_most_most() -> None:
    docs = {f"d{i:03d}": 10_000 for i in range(100)}
    order = {k: i for i, k in enumerate(docs)}
    for workers, expected in ((1, [50, 50]), (2, [25, 25, 25, 25])):
        size, budget = batch_limits(list(docs.values()), workers=workers, most=50)
        runs = make_batches(_planned(docs), order, size, budget)
        assert [len(r.documents) for r in runs] == expected
    # most = 20 decides: 6 runs that 2 workers take 3 each, not 5 of 20 (the last one alone)
    size, budget = batch_limits(list(docs.values()), workers=2, most=20)
    assert [len(r.documents) for r in make_batches(_planned(docs), order, size, budget)] == [17] * 5 + [15]
    size, budget = batch_limits([10_000] * 1000, workers=2, most=20)
    assert size == 20  # 50 runs: 25 for each worker already


def test_batch_size_asked_for_counts_documents_only() -> None:
    size, budget = batch_limits(list(SAMPLE.values()), workers=2, most=20, asked=4)
    runs = make_batches(_planned(SAMPLE), ORDER, size, budget)
    assert [len(r.documents) for r in runs] == [4, 3]


def test_after_a_failure_the_others_keep_their_sizes() -> None:
    batch = Planned.batch(_planned({k: SAMPLE[k] for k in ("squad_1973", "squad_complexity", "squad_normans")}))
    following = after_failure(batch, {"squad_complexity"}, ORDER, 3)
    assert [f.documents for f in following] == [["squad_1973"], ["squad_normans"], ["squad_complexity"]]
    assert [f.size for f in following] == [17_817, 25_438, 27_559]
