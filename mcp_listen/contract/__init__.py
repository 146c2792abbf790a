"""The tool contract, pure: the numbers it states (limits), whisper's languages, the argument and
result models with their validation and schemas (models), and the engine's typed results, the
`Tools` protocol an adapter serves and their wire form (results).

Imports no other mcp_listen package: config and every other package import it, never the way
back. import-linter checks that, type-only imports included.
"""
