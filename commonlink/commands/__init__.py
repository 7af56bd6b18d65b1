"""Thin Typer command functions, one module per area; registered on the app in ``commonlink.cli``.

Each command parses options, calls library functions and prints; no logic of its own lives here.
"""
