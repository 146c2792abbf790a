"""Speaking while listening: one converse exchange (half-duplex, or with barge-in), the echo path (the
played speech as the reference, its delay, WebRTC's AEC3, the linear echo model and its phases) and
the cut-in rule. Between engine (which composes an exchange from its parts) and speech/audio (the VAD the
turn's onset uses, the levels); docs/turn-taking.md describes it as a whole."""
