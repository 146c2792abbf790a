"""The microphone and audio files: device listing and resolution (devices), the one-recording
claim and the window stream (microphone), opening a PortAudio stream (stream), dBFS levels
(levels), the private recordings folder (recordings) and WAV writing (wavfile).

Never imports whisper, ollama, speech or the layers above; heavy libraries load on first use.
"""
