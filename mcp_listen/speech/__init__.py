"""Listening to one utterance: Silero VAD (vad), the stop-on-silence state machine and its
settings (endpoint), phrase cutting (phrases) and the per-utterance loop that
joins them (listener).

Of `audio` it uses only `levels` (the dBFS math) and the `Recording` type.
"""
