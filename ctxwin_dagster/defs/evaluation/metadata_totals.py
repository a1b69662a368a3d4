"""Totals the comparison reads from the latest materializations' metadata: each variant's
indexing costs, the index's embedding-window counts, the SWB replies."""

from collections.abc import Iterable, Iterator, Mapping

import dagster as dg

from ctxwin_dagster.defs.materializations import latest_metadata

#: The assets whose materializations carry each variant's indexing costs (contextualization
#: calls, tokens, cost; embedding) and the index's window counts. The comparison depends on
#: them (every partition), so they are edges of the graph and rerun it when they change; it
#: reads their latest materializations' metadata for the documents it compares.
COST_ASSETS = {
    "t_rag": ("t_rag_index",),
    "cc_rag": ("cc_rag_contexts", "cc_rag_index"),
    "swb_rag": ("global_summaries", "swb_rag_contexts", "swb_rag_index"),
}

#: Index metadata summed per variant for the report's embedding-window line.
WINDOW_FIELDS = ("rows_over_window", "rows_pooled", "chunk_tokens_cut", "context_tokens_cut")

#: ``swb_rag_contexts`` metadata summed for the report's line on the SWB replies.
SWB_REPLY_FIELDS = (
    "batches",
    "n_contexts",
    "fallbacks",
    "replies_swb_schema_enforced",
    "replies_swb_invalid",
    "replies_swb_repaired",
)


def latest_metadatas(
    instance: dg.DagsterInstance, assets: Iterable[str], doc_ids: Iterable[str]
) -> Iterator[dict[str, object]]:
    """The metadata of the latest materialization of each of ``assets`` for each of ``doc_ids``,
    document by document (empty for one never materialized)."""
    for doc_id in doc_ids:
        for asset in assets:
            yield latest_metadata(instance, asset, doc_id)


def sum_fields(metadatas: Iterable[Mapping[str, object]], fields: Iterable[str]) -> dict[str, float]:
    """Per field of ``fields``, the sum of its numeric values in ``metadatas`` (0.0 where there is none)."""
    totals = {f: 0.0 for f in fields}
    for meta in metadatas:
        for f in totals:
            value = meta.get(f)
            if isinstance(value, int | float):
                totals[f] += float(value)
    return totals


def _with_older_costs(meta: dict[str, object]) -> dict[str, object]:
    """``meta`` with the cost fields of metadata recorded before they existed: ``cost_usd`` was
    what was paid, and nothing was counted as read from a prompt cache."""
    for older in ("paid_usd", "uncached_cost_usd"):
        if older not in meta and "cost_usd" in meta:
            meta[older] = meta["cost_usd"]
    return meta


def indexing_costs(instance: dg.DagsterInstance, doc_ids) -> dict[str, dict[str, float]]:
    """Per variant, the contextualization totals recorded by the latest materializations of the
    assets for ``doc_ids`` (the documents whose results came into the comparison)."""
    from ctxwin_dagster.core.evaluation.comparison import INDEXING_FIELDS

    return {
        variant: sum_fields(map(_with_older_costs, latest_metadatas(instance, assets, doc_ids)), INDEXING_FIELDS)
        for variant, assets in COST_ASSETS.items()
    }
