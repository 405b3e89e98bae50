"""The index stage: what owns the SQLite index and the vector matrix.

The store and its schema migrations, the index file's health and its files on disk, the extra
keyword tokens of the FTS5 ``ident`` column, and the in-memory vector matrix (loaded from vec0,
saved beside the index, guarded by a readers-writer lock). Nothing here reads notes or answers
queries; the other stages build on it.
"""
