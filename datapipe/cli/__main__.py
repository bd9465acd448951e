"""`python -m datapipe.cli`: the `datapipe` command."""

from datapipe.cli import main

main()
