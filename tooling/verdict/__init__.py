"""`tinyperf check` and `tinyperf score`, the verbs over tooling/common/judge/. Imports tooling.common only."""
