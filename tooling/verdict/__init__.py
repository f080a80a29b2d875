"""`tinyperf check` and `tinyperf score`, the verbs over tooling/common/judge/. Imports tinyperf.tooling.common only."""
