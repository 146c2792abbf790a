"""The MCP adapter, the only package that imports `mcp`, `mcp_types` and `anyio`: the tools and
their results (app), a call's worker thread, cancellation and progress (calls), the stdin ledger
(ledger) and serving over stdio with a clean shutdown (stdio).
"""
