"""The stop-on-silence state machine, driven by plain probability sequences (32 ms windows)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mcp_listen.speech.endpoint import EndpointConfig, Endpointer

LOUD, QUIET, BETWEEN, JUST_LOUD = 0.9, 0.05, 0.4, 0.6
ROOT = Path(__file__).resolve().parents[2]


def run(probabilities, config: EndpointConfig | None = None):
    """Feed until a stop reason; return (reason, index of the deciding window, endpointer)."""
    endpointer = Endpointer(config or EndpointConfig())
    for index, probability in enumerate(probabilities):
        reason = endpointer.feed(probability)
        if reason is not None:
            return reason, index, endpointer
    return None, None, endpointer


def test_eight_loud_windows_confirm_speech_on_the_eighth():
    endpointer = Endpointer()
    for probability in [QUIET] * 5 + [LOUD] * 7:
        assert endpointer.feed(probability) is None
    assert not endpointer.speech_detected
    assert endpointer.feed(LOUD) is None
    assert endpointer.speech_detected
    assert endpointer.event == "speech_start"
    assert endpointer.speech_started_window == 5
    assert endpointer.last_speech_window == 12
    assert endpointer.windows == 13


def test_short_transient_never_confirms_and_times_out_on_the_exact_window():
    # A 150 ms knock (5 loud windows), then silence: no speech, no silence countdown.
    reason, index, endpointer = run([LOUD] * 5 + [QUIET] * 1000)
    assert reason == "no_speech_timeout"
    assert endpointer.windows == 313  # ceil(10000 / 32): 313 * 32 = 10016 >= 10000 > 312 * 32
    assert index == 312
    assert not endpointer.speech_detected
    assert endpointer.speech_started_window is None
    assert endpointer.last_speech_window is None


def test_transient_emits_no_events():
    endpointer = Endpointer()
    for probability in [LOUD] * 5 + [QUIET] * 100:
        endpointer.feed(probability)
        assert endpointer.event is None


def test_loud_windows_spread_wider_than_the_onset_span_do_not_confirm():
    # One loud window in three: at most 7 loud windows in any 600 ms (19 windows).
    reason, _, endpointer = run([LOUD, QUIET, QUIET] * 200)
    assert reason == "no_speech_timeout"
    assert not endpointer.speech_detected


def test_loud_windows_dense_enough_within_the_span_confirm():
    reason, _, endpointer = run([LOUD, QUIET] * 10 + [QUIET] * 1000)
    assert endpointer.speech_detected
    assert endpointer.speech_started_window == 0
    assert reason == "silence"


@pytest.mark.parametrize(
    ("gap", "confirms"),
    [(11, True), (12, False)],  # 4 + 11 + 4 = 19 windows fit the span; 4 + 12 + 4 = 20 do not
)
def test_onset_span_boundary(gap, confirms):
    endpointer = Endpointer()
    for probability in [LOUD] * 4 + [QUIET] * gap + [LOUD] * 4:
        endpointer.feed(probability)
    assert endpointer.speech_detected is confirms


@pytest.mark.parametrize(("silence_ms", "windows_needed"), [(100, 4), (1000, 32), (1024, 32), (1025, 33), (1500, 47)])
def test_silence_stops_on_the_first_window_reaching_silence_ms(silence_ms, windows_needed):
    config = EndpointConfig(silence_ms=silence_ms)
    reason, index, endpointer = run([LOUD] * 8 + [QUIET] * 100, config)
    assert reason == "silence"
    assert index == 8 + windows_needed - 1
    assert windows_needed * 32 >= silence_ms > (windows_needed - 1) * 32
    assert endpointer.last_speech_window == 7


def test_pause_shorter_than_silence_ms_does_not_stop():
    reason, index, _ = run([LOUD] * 8 + [QUIET] * 31 + [LOUD] * 8 + [QUIET] * 100)
    assert reason == "silence"
    assert index == 8 + 31 + 8 + 32 - 1  # the 992 ms pause was forgotten


def test_in_between_windows_continue_a_running_silence():
    # 20 quiet + 12 in-between = 32 windows = 1024 ms of silence run.
    reason, index, _ = run([LOUD] * 8 + [QUIET] * 20 + [BETWEEN] * 100)
    assert reason == "silence"
    assert index == 8 + 32 - 1


def test_in_between_windows_do_not_start_a_silence_run():
    endpointer = Endpointer()
    for probability in [LOUD] * 8 + [BETWEEN] * 100:
        assert endpointer.feed(probability) is None
    assert endpointer.silence_ms == 0
    assert endpointer.feed(QUIET) is None
    assert endpointer.event == "silence_start"


def test_a_speech_window_resets_the_countdown():
    probabilities = [LOUD] * 8 + [QUIET] * 30 + [JUST_LOUD] + [QUIET] * 100
    reason, index, endpointer = run(probabilities)
    assert reason == "silence"
    assert index == 8 + 30 + 1 + 32 - 1
    assert endpointer.last_speech_window == 38


def test_events_for_progress_reporting():
    endpointer = Endpointer()
    events = []
    for probability in [LOUD] * 8 + [QUIET] * 3 + [BETWEEN] + [LOUD] + [QUIET] * 2:
        endpointer.feed(probability)
        events.append(endpointer.event)
    assert [(i, e) for i, e in enumerate(events) if e] == [
        (7, "speech_start"),
        (8, "silence_start"),
        (12, "speech_resume"),
        (13, "silence_start"),
    ]


def test_ceiling_with_continuous_speech():
    reason, index, endpointer = run([LOUD] * 1000)
    assert reason == "ceiling"
    assert endpointer.windows == 469  # 469 * 32 = 15008 >= 15000 > 468 * 32
    assert index == 468
    assert endpointer.speech_detected


def test_ceiling_shorter_than_no_speech_timeout_reports_ceiling():
    reason, _, endpointer = run([QUIET] * 1000, EndpointConfig(max_ms=5000))
    assert reason == "ceiling"
    assert endpointer.windows == 157  # 157 * 32 = 5024 >= 5000
    assert not endpointer.speech_detected


def test_ceiling_equal_to_no_speech_timeout_reports_ceiling():
    reason, _, _ = run([QUIET] * 1000, EndpointConfig(max_ms=10000, no_speech_timeout_ms=10000))
    assert reason == "ceiling"


def test_silence_wins_over_ceiling_on_the_same_window():
    # Speech windows 0-7, then 32 silent windows: both rules fire on window 39 (40 * 32 = 1280 ms).
    reason, index, _ = run([LOUD] * 8 + [QUIET] * 100, EndpointConfig(max_ms=1280))
    assert (reason, index) == ("silence", 39)


def test_feeding_after_stop_is_an_error():
    reason, _, endpointer = run([QUIET] * 1000, EndpointConfig(max_ms=100))
    assert reason == "ceiling"
    assert endpointer.stop_reason == "ceiling"
    with pytest.raises(RuntimeError):
        endpointer.feed(QUIET)


@pytest.mark.parametrize("probability", [-0.1, 1.5, float("nan")])
def test_probability_outside_unit_interval_is_rejected(probability):
    with pytest.raises(ValueError):
        Endpointer().feed(probability)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"silence_ms": 0},
        {"silence_ms": -100},
        {"max_ms": 0},
        {"no_speech_timeout_ms": -1},
        {"window_ms": 0},
        {"window_ms": float("inf")},
        {"onset_ms": 0},
        {"onset_ms": 700, "onset_span_ms": 600},
        {"silence_threshold": 0.6, "speech_threshold": 0.5},
        {"silence_threshold": 0.0},
        {"speech_threshold": 1.2},
        {"speech_threshold": float("nan")},
        {"silence_ms": True},
        {"max_ms": "15000"},
    ],
)
def test_invalid_config_is_rejected(kwargs):
    with pytest.raises(ValueError):
        EndpointConfig(**kwargs)


def test_default_config_is_valid_and_derives_window_counts():
    config = EndpointConfig()
    assert config.onset_windows == 8
    assert config.onset_span_windows == 19
    assert EndpointConfig(silence_threshold=0.5, speech_threshold=0.5).silence_threshold == 0.5


# ---------------------------------------------------------------- Silero's decay, timed by level

SPEECH_DB, TAIL_DB, FLOOR_DB = -15.0, -50.0, -70.0


def run_levels(pairs, config: EndpointConfig | None = None):
    """Like run(), feeding (probability, level_db) pairs."""
    endpointer = Endpointer(config or EndpointConfig())
    for index, (probability, level) in enumerate(pairs):
        if endpointer.feed(probability, level) is not None:
            return index, endpointer
    return None, endpointer


def speech_then(tail):
    """2 s of noise floor, 1 s of loud speech, then `tail` pairs, then silence at the floor."""
    return [(QUIET, FLOOR_DB)] * 62 + [(LOUD, SPEECH_DB)] * 31 + tail + [(QUIET, FLOOR_DB)] * 100


def test_quiet_windows_of_silero_decay_count_as_silence():
    # 3 windows of Silero's decay: still "speech" by probability, already 35 dB down by level.
    index, endpointer = run_levels(speech_then([(LOUD, TAIL_DB)] * 3))
    plain, _ = run_levels([(p, None) for p, _ in speech_then([(LOUD, TAIL_DB)] * 3)])
    assert plain - index == 3  # stops three windows (96 ms) sooner
    speech_end = 62 + 31
    assert (index + 1 - speech_end) * 32 >= 1000  # still a full silence_ms after the loud speech
    assert endpointer.last_speech_window == speech_end + 2  # the VAD's own view is unchanged


def test_decay_credit_is_bounded():
    # Far under the loudest speech: up to decay_windows count.
    index, _ = run_levels(speech_then([(LOUD, TAIL_DB)] * 14))
    speech_end = 62 + 31
    decay = EndpointConfig().decay_windows
    assert decay == 12
    assert index + 1 - speech_end == 14 + 32 - decay  # only 12 of the 14 quiet loud windows count


def loud_room_fading_word(word_db: float):
    """Steady loud noise (floor -30 dB, swinging +-1 dB from window to window), speech at -18 dB (the
    peak), then a last word fading to `word_db` for 6 windows that Silero still scores as speech, then
    the room again. Returns the pairs and the index just after the word's last window."""
    room = [(QUIET, -31.0), (QUIET, -29.0)] * 31
    pairs = room + [(LOUD, -18.0)] * 31 + [(LOUD, word_db)] * 6
    return pairs + [(QUIET, -31.0), (QUIET, -29.0)] * 50, len(pairs)


def test_a_fading_word_in_a_loud_room_is_not_credited():
    # 4 dB over the floor is inside the noise's own swing, but it is the word: "near the floor" proves
    # nothing in a loud room, so the countdown starts after it (it once started 6 windows sooner).
    pairs, word_end = loud_room_fading_word(-26.0)
    index, endpointer = run_levels(pairs)
    assert endpointer.stop_reason == "silence"
    assert (index + 1 - word_end) * 32 >= 1000
    assert index + 1 - word_end == 32  # and no later than without the level


def test_in_a_loud_room_only_windows_quieter_than_the_room_are_credited():
    # 20 dB under the -18 dB peak is under the -30 dB floor: that much quieter than the room, it is
    # not the word, and it is credited.
    pairs, word_end = loud_room_fading_word(-39.0)
    index, _ = run_levels(pairs)
    assert index + 1 - word_end == 32 - 6


def test_a_tail_far_under_the_peak_in_a_quiet_room_is_credited():
    # Quiet room (-70 dB), speech at -13 dB, the last syllable fading through -36, -39, -42 dB (23-29 dB
    # under the peak): Silero's decay, credited, so the stop comes 3 windows sooner than by Silero alone.
    # The tail stays in the recording (EndpointConfig.quiet_below_peak_db says what this costs).
    tail = [(LOUD, -36.0), (LOUD, -39.0), (LOUD, -42.0)]
    pairs = [(QUIET, FLOOR_DB)] * 62 + [(LOUD, -13.0)] * 31 + tail + [(QUIET, FLOOR_DB)] * 100
    index, _ = run_levels(pairs)
    assert index + 1 - (62 + 31 + 3) == 32 - 3


def test_near_a_moderate_rooms_floor_and_far_under_the_peak_is_quiet():
    # Floor -50 dB, speech -15 dB (35 dB over the room): a tail at -46 dB (4 dB over the floor, 31 dB
    # under the peak, quieter than -45 dBFS) is the room; its 3 windows count as silence.
    pairs = [(QUIET, -50.0)] * 62 + [(LOUD, SPEECH_DB)] * 31 + [(LOUD, -46.0)] * 3 + [(QUIET, -50.0)] * 100
    index, _ = run_levels(pairs)
    plain, _ = run_levels([(p, None) for p, _ in pairs])
    assert plain - index == 3


def test_loud_tail_is_not_credited():
    # 15 dB under the peak and far above the floor: Silero may be right, this is speech.
    quiet, _ = run_levels(speech_then([(LOUD, -30.0)] * 3))
    plain, _ = run_levels([(p, None) for p, _ in speech_then([(LOUD, -30.0)] * 3)])
    assert quiet == plain


def test_only_the_windows_just_before_the_silence_run_are_credited():
    # A quiet window early in the speech, then loud again, then the end: nothing to credit.
    tail = [(LOUD, TAIL_DB), (LOUD, SPEECH_DB)]
    index, _ = run_levels(speech_then(tail))
    plain, _ = run_levels([(p, None) for p, _ in speech_then(tail)])
    assert index == plain


def babble_pause(stray_db: float):
    """A noisy room (floor -40 dB): speech, 500 ms of pause, one window Silero scores as speech at
    `stray_db`, then the room again (Silero in the hysteresis band, as in babble)."""
    pause = [(QUIET, -40.0)] * 16 + [(LOUD, stray_db)] + [(0.4, -40.0)] * 60
    return [(QUIET, -40.0)] * 62 + [(LOUD, SPEECH_DB)] * 31 + pause


def test_a_speech_window_at_the_rooms_level_does_not_restart_the_pause():
    index, endpointer = run_levels(babble_pause(-38.0))  # 2 dB over the floor: the crowd
    assert (index + 1 - 93) * 32 == 1024  # stopped 1 s after the speech, as without the stray window
    assert endpointer.event is None and endpointer.last_speech_window == 92


def test_a_speech_window_louder_than_the_room_resumes_speech():
    index, endpointer = run_levels(babble_pause(-25.0))  # 15 dB over the room: the user
    assert endpointer.last_speech_window == 93 + 16
    assert index is None  # the in-between windows that follow only continue; none starts a run


def test_speech_from_the_first_window_is_not_taken_for_the_room():
    # No room before the speech: Silero scores its first windows low, so they look like the room.
    # Speech resuming after a pause at that same level must still resume it (a floor frozen from
    # those windows once cut a real recording in the middle of a sentence).
    start = [(0.2, -18.0)] * 10 + [(LOUD, -15.0)] * 31 + [(QUIET, -70.0)] * 16
    index, endpointer = run_levels(start + [(LOUD, -18.0)] * 40 + [(QUIET, -70.0)] * 40)
    assert endpointer.last_speech_window == len(start) + 39
    # After the resumed speech, not during it. Limit: its level is the "room" the quiet rule was
    # given, so the decay credit (at most decay_windows) still moves the stop up to 256 ms sooner.
    assert len(start) + 40 + 31 - EndpointConfig().decay_windows <= index <= len(start) + 40 + 31


def test_level_must_be_dbfs():
    for level in (1.0, float("nan")):
        with pytest.raises(ValueError, match="level_db"):
            Endpointer().feed(LOUD, level)
    with pytest.raises(ValueError, match="decay_windows"):
        EndpointConfig(decay_windows=-1)


# ---------------------------------------------------------------- when Silero need not run


def fed(pairs, config: EndpointConfig | None = None) -> Endpointer:
    endpointer = Endpointer(config or EndpointConfig())
    for probability, level in pairs:
        endpointer.feed(probability, level)
    return endpointer


def test_vad_runs_for_the_first_windows_of_a_recording():
    endpointer = Endpointer()
    for _ in range(8):
        assert endpointer.needs_vad(FLOOR_DB)
        endpointer.feed(QUIET, FLOOR_DB)
    assert not endpointer.needs_vad(FLOOR_DB)  # 8 windows of a quiet floor: nobody is speaking


def test_vad_runs_for_anything_louder_than_the_floor():
    endpointer = fed([(QUIET, FLOOR_DB)] * 20)
    assert not endpointer.needs_vad(FLOOR_DB + 2.9)
    assert endpointer.needs_vad(FLOOR_DB + 3.1)
    assert endpointer.needs_vad(SPEECH_DB)


def test_vad_always_runs_in_a_loud_room():
    endpointer = fed([(QUIET, -39.0)] * 40)
    assert endpointer.needs_vad(-39.0)
    endpointer = fed([(QUIET, -41.0)] * 40)
    assert not endpointer.needs_vad(-41.0)


def test_vad_runs_while_an_onset_is_pending():
    endpointer = fed([(QUIET, FLOOR_DB)] * 20 + [(LOUD, SPEECH_DB)] * 3 + [(QUIET, FLOOR_DB)] * 5)
    assert endpointer.needs_vad(FLOOR_DB)  # 3 loud windows could still become speech
    endpointer = fed([(QUIET, FLOOR_DB)] * 20 + [(LOUD, SPEECH_DB)] * 3 + [(QUIET, FLOOR_DB)] * 20)
    assert not endpointer.needs_vad(FLOOR_DB)  # they fell out of the onset span


def test_vad_runs_through_speech_and_the_start_of_each_pause():
    speech = [(QUIET, FLOOR_DB)] * 20 + [(LOUD, SPEECH_DB)] * 31
    endpointer = fed(speech)
    assert endpointer.speech_detected and endpointer.needs_vad(FLOOR_DB)
    for _ in range(7):
        endpointer.feed(QUIET, FLOOR_DB)
        assert endpointer.needs_vad(FLOOR_DB)  # a pause between words: Silero still decides
    endpointer.feed(QUIET, FLOOR_DB)
    assert not endpointer.needs_vad(FLOOR_DB)  # 8 windows of silence at the floor


def test_skipped_windows_count_as_silence():
    pairs = [(QUIET, FLOOR_DB)] * 20 + [(LOUD, SPEECH_DB)] * 31
    endpointer = fed(pairs)
    stops = 0
    for index in range(100):
        probability = QUIET if endpointer.needs_vad(FLOOR_DB) else 0.0
        if endpointer.feed(probability, FLOOR_DB):
            stops = index + 1
            break
    assert stops == 32  # 1000 ms, the same as without the gate


def test_the_pause_that_ends_the_turn_comes_with_each_window_and_defaults_to_silence_ms():
    """end_of_turn "smart" holds a pause longer than silence_ms by passing the longer target with the window
    (it once wrote it into the endpointer's attribute); without one, silence_ms ends it."""
    speech = [QUIET] * 5 + [LOUD] * 20
    plain, held = Endpointer(EndpointConfig(silence_ms=1000)), Endpointer(EndpointConfig(silence_ms=1000))
    for probability in speech:
        assert plain.feed(probability) is None and held.feed(probability, silence_ms=3000) is None
    plain_stop = next(i for i in range(200) if plain.feed(QUIET) is not None)
    held_stop = next(i for i in range(200) if held.feed(QUIET, silence_ms=3000) is not None)
    assert plain_stop < 1000 / 32 + 2 and 3000 / 32 - 13 <= held_stop < 3000 / 32 + 2, (plain_stop, held_stop)
