"""Service level objectives (docs/slo.md): an SLO follows one
outcome-rate or quantile check, counts its good and bad events per epoch-aligned bucket, and
reads burn rates, an error budget and four alert tiers off those buckets.

`specs` resolves the configured SLOs against the configured checks; `budget` holds the pure
arithmetic (`figures`). An SLO as a report carries it (`SloSpec`, `SloReport`) lives in
`checks.base`, beside the report.
"""
