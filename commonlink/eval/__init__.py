"""Scoring models: prompts, answer parsing, backends, protocols, metrics, prediction cache."""
