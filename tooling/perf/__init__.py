"""Off the submission path: `tinyperf report`, `tinyperf bench`, `python -m tooling.perf.beamlog`. Imports the stages
below it."""
