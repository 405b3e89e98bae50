"""The ingest stage: memory folders and transcripts into the index.

Which files are indexed (the filter and the path rule), how a note becomes chunks (Markdown,
front matter, conversation windows, over-long lines), the incremental sync of memory folders and
of transcripts (``sessions``), the watcher that notices edits, the vectors filled in behind the
keyword rows, what a sync reports, and how stale the index is when no daemon keeps it current.
"""
