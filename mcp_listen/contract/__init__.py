"""The tool contract, pure: the numbers it states (limits), whisper's languages, the argument and
result models with their validation and schemas (models), and the engine's typed results, the
`Tools` protocol an adapter serves and their wire form (results).

Imports only `mcp_listen.errors` and `mcp_listen.config`; every other package may import it.
"""
