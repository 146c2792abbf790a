"""Barge-in's thresholds, in one frozen, validated config: the cut-in rules and the echo path's phases
(`BargeInConfig`), the echo's delay measurement (`DelayConfig`) and the linear echo model
(`EchoModelConfig`). The exchange takes one (the default unless a test or the bench passes another), so a
threshold is changed here or tried on the bench without patching a module. Each field says why it is
what it is in a line; the measurements behind the numbers are in bench/README.md ("Barge-in's
thresholds")."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from mcp_listen.contract.limits import SAMPLE_RATE


@dataclass(frozen=True)
class DelayConfig:
    """How the echo's delay behind the played speech is measured (echo.Aligner, echo.FarEnd)."""

    search_lead_s: float = 0.15
    """How far ahead of a window's estimated time the reference is taken until the delay is measured: the
    echo lags it by this plus the sound server's own buffering, inside AEC3's reach (the speaker has
    written only ~0.2 s beyond what is heard)."""
    aligned_lead_s: float = 0.01
    """How far the reference leads the echo once measured: AEC3 converges at once near zero, and must
    never see the echo before its reference."""
    max_lag_s: float = 0.5
    """The longest echo delay looked for, behind a reference taken search_lead_s ahead."""
    align_samples: int = SAMPLE_RATE
    """Reference and microphone samples correlated to measure the delay: a second of played speech."""
    gap_margin_s: float = 0.02
    """A block handed over after the device ran dry is heard this much before its hand-over: the reference
    may lead the echo a little, never trail it."""
    earliest_share: float = 0.7
    """The echo's lag is the earliest lag whose correlation reaches this share of the peak (within
    earliest_s before it): a reflection can correlate better than the direct path."""
    earliest_s: float = 0.03
    """How far before the correlation's peak the direct path is looked for."""
    min_correlation: float = 0.3
    """The normalised correlation peak under which no echo is found in a second."""
    quiet_db: float = -45.0
    """The microphone's level (dBFS) over a second with no echo found under which it is taken for
    headphones; a louder second proves nothing, and the delay is measured again."""

    def __post_init__(self) -> None:
        _check(self, counts=("align_samples",), shares=("earliest_share", "min_correlation"))
        _check(self, positive=("search_lead_s", "aligned_lead_s", "max_lag_s", "gap_margin_s", "earliest_s"))
        _check(self, finite=("quiet_db",))


@dataclass(frozen=True)
class EchoModelConfig:
    """The linear echo model of the double-talk rule (doubletalk.EchoModel)."""

    partitions: int = 10
    """Echo path modelled: this many 16 ms blocks, 160 ms past the reference; twice as many did no better."""
    step: float = 0.7
    """The adaptation step of the whole-filter normalised update (stable below 2)."""
    step_in_double_talk: float = 0.05
    """Share of the step kept while the prediction leaves more than freeze_db of the microphone: the
    filter must not learn the user's voice as echo."""
    freeze_db: float = -6.0
    """The leftover (dB against the microphone) over which the step slows to step_in_double_talk."""
    warm_blocks: int = 60
    """Blocks (~1 s) of full-speed learning before a poor prediction can slow it."""
    regularisation: float = 1e-3
    """Added to each bin's power, as a share of the mean bin's: empty bins learn slowly, not by leaps."""
    quiet_dbfs: float = -60.0
    """A reference quieter than this over the filter's length (dither between sentences) teaches nothing."""
    band_hz: tuple[int, int] = (200, 4000)
    """The speech band in which energies are compared: a room's hum and fans sit below it."""
    history_windows: int = 60
    """The echo-alone baseline and the microphone's typical level: medians over the last ~2 s of speech."""
    min_history: int = 10
    """Windows of played speech before the baseline and the typical level are known."""
    playing_energy: float = 1e6
    """Band energy of the reference over which a window counts as the agent speaking."""
    learnt_db: float = -12.0
    """The echo-alone baseline must be this far down before the model counts as learnt and its rule decides:
    past it, a rise of rise_db is within the leftover's own swings."""
    diverged_windows: int = 10
    """The span (~0.3 s) over which the guard looks for a residual louder than the microphone."""
    louder_share: float = 0.7
    """The share of diverged_windows with a residual louder than the microphone that makes the guard reset
    the model (a share, not a run: a shifted path leaves a window or two a little quieter now and then)."""
    louder_db: float = 1.0
    """Louder means this much louder, both measured above the noise floor (where noise fills a window the
    two are within a fraction of a dB)."""
    max_gain_db: float = 20.0
    """The filter's energy past which it has run away: no loudspeaker path makes the echo 20 dB louder."""
    jump_db: float = 10.0
    """A rise of the filter's energy within one window past which it has run away."""
    clipping_echo: float = 24576.0
    """The predicted echo's peak (three quarters of full scale) past which a clipped window is the echo's."""
    floor_smoothing_s: float = 0.15
    """The leftover's power per bin is smoothed over this long before its minimum is the noise floor."""
    floor_rise_db_per_s: float = 3.0
    """How fast the noise floor may rise: the echo's and the user's words never become floor."""
    floor_margin_db: float = 12.0
    """Only energy this far over the floor counts: a smoothed noise's minimum sits several dB under its mean."""
    floor_kept: float = 0.1
    """Share of the floor added back to each energy, so that a window of noise alone is near 0 dB."""
    floor_regularisation: float = 1.0
    """Each bin's step is normalised by the reference's power plus this many times the noise floor, so the
    model does not learn the room's noise as echo."""

    def __post_init__(self) -> None:
        _check(self, counts=("partitions", "warm_blocks", "history_windows", "min_history", "diverged_windows"))
        _check(self, shares=("step_in_double_talk", "louder_share", "floor_kept"))
        _check(self, positive=("step", "regularisation", "playing_energy", "clipping_echo", "floor_smoothing_s"))
        _check(self, positive=("floor_rise_db_per_s", "floor_regularisation", "louder_db", "max_gain_db", "jump_db"))
        _check(self, finite=("freeze_db", "quiet_dbfs", "learnt_db", "floor_margin_db"))
        low, high = self.band_hz
        if not (0 <= low < high <= SAMPLE_RATE // 2):
            nyquist = SAMPLE_RATE // 2
            raise ValueError(f"EchoModelConfig.band_hz: expected 0 <= low < high <= {nyquist}; got {self.band_hz!r}.")
        if self.step >= 2:
            raise ValueError(f"EchoModelConfig.step: expected a number in (0, 2), the stable range; got {self.step!r}.")
        if self.min_history > self.history_windows:
            raise ValueError(f"EchoModelConfig.min_history: expected at most history_windows; got {self.min_history}.")


@dataclass(frozen=True)
class BargeInConfig:
    """When the user's voice over the agent's stops the speech (cut_in.py), and the echo path's phases
    that decide which rule counts (path.py)."""

    onset_windows: int = 2
    """The span (64 ms) over which the double-talk rule must hold."""
    onset_probability: float = 0.6
    """Silero's average over onset_windows, on what the echo model leaves, for the double-talk rule."""
    rise_db: float = 10.0
    """How far the share of the microphone the echo model leaves must rise over the echo-alone baseline."""
    level_db: float = -6.0
    """The leftover against the microphone's usual level while the agent speaks: not the faint end of a
    word, where the echo fades faster than the model follows."""
    clear_rise_db: float = 15.0
    """A rise this large (every window leaving less than the microphone heard)..."""
    clear_level_db: float = -10.0
    """...needs the leftover only this loud: a user's first syllables under a louder echo."""
    strict_windows: int = 8
    """The span (256 ms) of the rule on AEC3 alone, while the echo model has not learnt the path."""
    strict_probability: float = 0.8
    """Silero's average over strict_windows of AEC3's output, for the rule on AEC3 alone."""
    settle_s: float = 1.0
    """Listening after the echo's delay was measured before the rule on AEC3 alone counts."""
    converged_db: float = 10.0
    """How far under the microphone AEC3's output must be (the median over converged_windows of loud speech)
    before the rule on AEC3 alone counts: time alone is no proof that AEC3 has learnt the path."""
    converged_windows: int = 16
    """The windows (0.5 s) of loud played speech AEC3's suppression is judged over."""
    loud_reference_db: float = -45.0
    """A window's reference (dBFS) from which it counts as loud played speech, not a pause between words."""
    relearn_s: float = 3.0
    """Speech heard with the echo model unlearnt after the delay was measured before it is measured again
    (once an exchange): an echo the model still cannot explain has moved."""
    replay_windows: int = 32
    """The windows (the last second) the fresh echo model is taught again once the delay is measured..."""
    replay_passes: int = 3
    """...this many times, so that it knows the path when the user may first cut in."""
    handover_windows: int = 47
    """Windows handed to the listener when the user cuts in (the last 1.5 s): the user may have begun well
    before the rule was met; the listener's own onset decides where their speech starts."""
    onset_lookback_windows: int = 32
    """How far before the cut-in (1 s) the user's first rise over the echo is looked for (pre_roll)."""
    confirm_s: float = 0.5
    """A cut-in pauses the agent; this long after the pause the user's speech is confirmed (it stops for
    good) or not (it plays on). LiveKit waits 0.5 s of speech before it interrupts."""
    confirm_lead_windows: int = 6
    """Windows before the rule's own span that whisper hears with the pause: the user's first syllable (192 ms)."""
    confirm_settle_windows: int = 4
    """The pause's first windows (128 ms), which a fresh Silero hears on the microphone itself but which do not
    count: the speech already on its way (the output latency, the room) dies away in them."""
    confirm_speech_windows: int = 4
    """Of the pause's other windows, those Silero must hear as speech (128 ms). Over the echo, claps, a tone sweep
    or plucked notes fired the onset and the echo's residual kept Silero on speech; on the microphone alone,
    with the agent quiet, they sound like speech in no window, a voice in 77-91 % of them."""
    confirm_probability: float = 0.5
    """Silero's probability from which a window counts as speech for the confirmation."""
    confirm_words: int = 1
    """With whisper (converse): the words heard that are the user's (not the agent's, not noise) needed."""
    delay: DelayConfig = field(default_factory=DelayConfig)
    model: EchoModelConfig = field(default_factory=EchoModelConfig)

    def __post_init__(self) -> None:
        _check(self, counts=("confirm_lead_windows", "confirm_settle_windows", "confirm_speech_windows"))
        _check(self, counts=("confirm_words",))
        _check(self, shares=("confirm_probability",), positive=("confirm_s",))
        _check(self, counts=("onset_windows", "strict_windows", "converged_windows", "replay_windows"))
        _check(self, counts=("replay_passes", "handover_windows", "onset_lookback_windows"))
        _check(self, shares=("onset_probability", "strict_probability"))
        _check(self, positive=("settle_s", "relearn_s"))
        _check(self, finite=("rise_db", "level_db", "clear_rise_db", "clear_level_db", "converged_db"))
        _check(self, finite=("loud_reference_db",))


def _check(
    config: object,
    *,
    counts: tuple[str, ...] = (),
    shares: tuple[str, ...] = (),
    positive: tuple[str, ...] = (),
    finite: tuple[str, ...] = (),
) -> None:
    """Refuse a field outside its range, naming the config, the field, the range and the value."""
    kind = type(config).__name__
    for names, accepted, ok in (
        (counts, "an integer >= 1", lambda v: isinstance(v, int) and v >= 1),
        (shares, "a number in (0, 1]", lambda v: _number(v) and 0 < v <= 1),
        (positive, "a finite number > 0", lambda v: _number(v) and math.isfinite(v) and v > 0),
        (finite, "a finite number", lambda v: _number(v) and math.isfinite(v)),
    ):
        for name in names:
            value = getattr(config, name)
            if isinstance(value, bool) or not ok(value):
                raise ValueError(f"{kind}.{name}: expected {accepted}; got {value!r}.")


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


DEFAULT = BargeInConfig()
"""The product's barge-in."""
