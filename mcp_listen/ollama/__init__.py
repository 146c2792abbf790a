"""The local Ollama daemon: questions and their errors (client), the bounded, redirect-free HTTP
transport with the bounded NDJSON reply reader (http).

Never imports audio, whisper or speech.
"""
