"""The project's command-line tools, run from the repository root as modules (``python -m
scripts.benchmark ...``) so that they import the plugin and one another without path edits."""
