"""The judge of logs and trees on disk (check_path in check.py, the score in score.py): what `tinyperf check` and
`tinyperf score` print, and what `tinyperf run` and `tinyperf package` act on."""
