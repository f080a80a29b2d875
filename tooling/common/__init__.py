"""What two or more stages share: errors, bounded file and log reading, the results and submission trees, the ledger,
the judge (judge/), the rendered scripts and compose.yaml, the mlperf_logging tools, the docker SDK. Imports no stage."""
