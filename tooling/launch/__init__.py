"""Running: the run loop and its engines (host, container, Slurm), the in-container entry, the ledger, `tinyperf
status`, the console and the systems JSON. Imports common, prep and verdict."""
