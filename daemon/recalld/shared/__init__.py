"""The shared store: chosen memory folders on PostgreSQL + pgvector, across machines and teams.

The daemon stays the single writer of what it watches: it pushes the chunks of shared folders,
with the vectors it already has, into its own collection (:mod:`.push`), and searches the
collections it may read beside its local index (:mod:`.channel`). PostgreSQL's roles and
row-level security decide who reads and writes what (:mod:`.schema`). Nothing here is imported
unless ``[shared] url`` is set: psycopg is the optional extra ``recalld[shared]``.
"""
