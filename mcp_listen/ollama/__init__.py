"""The local Ollama daemon: questions and their errors (client), the bounded, redirect-free HTTP
transport (http) and the bounded NDJSON reply reader (stream).

Never imports audio, whisper or speech.
"""
