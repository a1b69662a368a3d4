"""Plain-Python core of ctxwin. Imports neither dagster, ragas nor lancedb."""
