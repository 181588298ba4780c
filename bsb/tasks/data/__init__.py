"""Problem files: reading rows from JSONL / JSON / Parquet / CSV (:mod:`.files`) and the published schemas
(:mod:`.schemas`)."""
