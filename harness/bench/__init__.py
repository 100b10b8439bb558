"""Benchmarks: `tao bench ...` commands that print JSON and a table."""
