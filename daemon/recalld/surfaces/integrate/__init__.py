"""``recalld integrate``: wire recalld into an agent (MCP server, hooks, transcript folder).

One module per agent (:mod:`.claude_code`, :mod:`.codex`, :mod:`.gemini_cli`), the edits they
share (:mod:`.json_servers`, :mod:`.claude_hooks`, :mod:`.transcripts`), and the safe file
handling (:mod:`.config_edit`, :mod:`.apply`); :mod:`.command` is the command line.
"""
