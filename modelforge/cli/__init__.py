"""Command-line commands; ``modelforge/__main__.py`` dispatches to them."""
