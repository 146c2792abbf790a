"""whisper.cpp: model names and finding a model (names), `models pull` (store), the GGML file walk
with what the loader expects (ggml), opening and admitting a model file (model_file,
admission), its memory need (memory), the test load in a child (probe, probe_child), the binding
(transcriber, with its context) and audio conditioning and text clean-up (text).

Never imports audio, ollama or speech.
"""
