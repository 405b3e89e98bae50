"""Embedding providers: a small Protocol, a registry, the local default and remote services."""
