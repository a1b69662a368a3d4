"""The vector index in LanceDB: chunk tables (:mod:`.vectorstore`), their row schema
(:mod:`.rows`), compaction and clean-up (:mod:`.upkeep`) and writers' table locks (:mod:`.locks`)."""
