"""Partitions: one dynamic partition per document file (its doc_id, the file stem)."""

from __future__ import annotations

import dagster as dg

DOCUMENTS_PARTITION = "documents"

#: Kept in sync with the documents folder by :func:`ctxwin_dagster.defs.sensors.documents_sensor`.
documents_partitions = dg.DynamicPartitionsDefinition(name=DOCUMENTS_PARTITION)
