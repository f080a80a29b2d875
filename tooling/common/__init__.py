"""What every stage reads through: errors, bounded file and log reading, the results and submission trees, the
mlperf_logging tools, the docker SDK. Imports no other stage."""
