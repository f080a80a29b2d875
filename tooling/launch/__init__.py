"""Running: the run loop and its engines (host, container, Slurm), the in-container entry, `tinyperf status`, the
console and the systems JSON. Imports tinyperf.tooling.common only."""
