"""Speech output: Piper voices (the store: finding, checking, pulling); synthesis and playback come later."""
