"""Tao's harness: the Think-Act-Observe loop, events, engines, speculation and the `tao` CLI."""
