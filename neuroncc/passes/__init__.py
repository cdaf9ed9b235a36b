"""Compiler passes over the IR: one pass per module, each registered by its command-line name."""
