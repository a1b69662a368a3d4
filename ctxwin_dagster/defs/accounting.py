"""Turning call records into the metadata a user reads in the Dagster UI."""

from collections.abc import Iterable

from ctxwin_dagster.backends.base import CallRecord, Ledger, Totals


def call_metadata(records: Iterable[CallRecord], runtime_s: float) -> Totals:
    """Counts, tokens, characters, costs and cache hits of ``records`` (never the key or prompts).

    ``cost_usd`` is the cost of the work (a cache hit counts at the cost of the call it reuses),
    ``paid_usd`` what this materialization paid (cache hits count 0), ``uncached_cost_usd`` the
    cost of the work on a server without prompt caching (``cached_tokens`` priced as input).
    """
    totals = Ledger.summarize(list(records))
    return {
        "calls": totals["calls"],
        "cache_hits": totals["cache_hits"],
        "failed_calls": totals["failures"],
        "input_tokens": totals["input_tokens"],
        "output_tokens": totals["output_tokens"],
        "cached_tokens": totals["cached_tokens"],
        "input_chars": totals["input_chars"],
        "output_chars": totals["output_chars"],
        "cost_usd": round(totals["cost_usd"], 6),
        "paid_usd": round(totals["paid_usd"], 6),
        "uncached_cost_usd": round(totals["uncached_cost_usd"], 6),
        "cost_known": totals["cost_known"],
        "runtime_s": round(runtime_s, 3),
        "model_latency_s": round(totals["latency_s"], 3),  # time in model calls (cache hits: lookups)
    }
