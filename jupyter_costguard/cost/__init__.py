"""Stage 2, cost: prices (catalog, detection), the spend model, the ledger that persists it and
the documents built from it; the service that runs sampling and cost once per tick."""
