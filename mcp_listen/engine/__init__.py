"""The engine: one per process (engine.Engine), its collaborators as small protocols and their
real implementations (parts), and allocator hygiene (memory). It composes audio, speech, whisper
and ollama into the tools' typed results; it knows nothing of MCP.
"""
