"""The perf lab: benchmarks against PyTorch, BEAM search tools and end-to-end scripts; run from a checkout, never in
the wheel or the images."""
