"""Benchmarks that print numbers and save them as JSON."""
