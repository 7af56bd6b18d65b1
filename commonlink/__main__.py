"""``python -m commonlink``: the same as the ``commonlink`` command."""

from commonlink.cli import main

main()
