"""The simulator's typed settings: ``SimConfig`` (the ``sim`` config block) and the values its keys may take."""

from __future__ import annotations

import dataclasses
from typing import Annotated

import jax

from ltrjax import clicks as click_lib
from ltrjax.constraints import (ConfigError, Each, Length, NonNegativeInt, OneOf, Positive, PositiveInt, Probability,
                                Range, check_fields, strict_fields)

SPLITS = ("train", "vali", "test")


RELEVANCE_MAPPINGS = click_lib.RELEVANCE_MAPPINGS  # one list, next to the mappings (ltrjax.clicks)
DISCOUNTS = ("auto", "log2", "examination")
CLICK_RNGS = ("auto", "host", "device")
HISTORY_SPLITS = ("test", "all")
SEGMENT_WIDTHS = ("phase", "ladder", "classes")
SESSION_COUNTS = ("ebrank", "ucbrank")
RETRAIN_EXAMPLES = ("auto", "host", "device")
TRIAL_SETUPS = ("auto", "host", "device")
CLASS_STEPS = 64  # sim.segment_widths=classes: lanes per bucket sized for about this many steps per segment
# the sim keys that change only what is reported (history_splits) or how fast (segment_widths, retrain_examples):
# ltrjax.record.REPORTING_KEYS, PERFORMANCE_KEYS


@dataclasses.dataclass(frozen=True)
class SimConfig:
    """Protocol constants (defaults: EBRank §5.1, seed-code.md §1.3); also the schema of the ``sim`` config
    block (``ltrjax.schema``): annotations give the types and allowed values, ``__post_init__`` checks them."""

    top_k: PositiveInt = 5
    initial_docs: Annotated[tuple[int, int], Length(2), Each(Range(1))] = (5, 9)
    entry_prob: Probability = 1.0
    sessions: PositiveInt | None = None  # None: counted by ``session_count`` (``default_session_count``)
    # how sessions=None counts the main phase's sessions: "ebrank" = #queries x (mean docs - 5) / entry_prob (EBRank
    # Eq. 28), "ucbrank" = #queries x mean docs / entry_prob (UCBRank §6.1.2: 134k, 30k, 2.4M, 7.6M sessions)
    session_count: Annotated[str, OneOf(SESSION_COUNTS)] = "ebrank"
    warmup_sessions_per_query: NonNegativeInt = 20
    n_updates: PositiveInt = 20
    refreshes: PositiveInt | None = None  # segments = behaviour-feature refreshes; None: n_updates (UCBRank: 100)
    train_after_warmup: bool = False
    gamma: Annotated[float, Range(0, 1, lo_open=True)] = 0.995
    relevance: Annotated[str, OneOf(RELEVANCE_MAPPINGS)] = "ebrank"
    relevance_eps_min: Probability = 0.1
    # NDCG discount: "auto" = the examination curve theta_k of a position-based click model under
    # the EBRank mapping (EBRank's gain/discount convention), else 1/log2(k+1); or "log2"/"examination".
    discount: Annotated[str, OneOf(DISCOUNTS)] = "auto"
    lanes_per_query: Positive = 0.1  # lanes = clip(queries * this, min_lanes, max_lanes)
    min_lanes: PositiveInt = 32
    max_lanes: PositiveInt = 1024
    # click uniforms: "host" = NumPy PCG64 per segment (reference-exact), "device" = jax.random inside the compiled
    # step (no host work or transfer per segment; for accelerators), "auto" = "device" on a GPU or TPU (or with
    # trial_setup=device), else "host" (``resolved``)
    click_rng: Annotated[str, OneOf(CLICK_RNGS)] = "auto"
    # queries evaluated (Warm/Cold NDCG) at the intermediate evaluation points: "test" (what the reports show
    # over time; ~1/5 of the evaluation work) or "all" splits; the final point always evaluates every query
    history_splits: Annotated[str, OneOf(HISTORY_SPLITS)] = "test"
    # entry slots a narrowing policy scans: "phase" = one width per bucket for the whole phase (multiple of 32; one
    # segment program), "ladder" = per segment on a geometric ladder (fewer padded slots, but one program per
    # width set: 7-9 compiles at the synthetic MQ2007/MSLR shapes), "classes" = per segment and query, the
    # smallest of a few class widths that holds its documents (one program per phase). Same results either way.
    segment_widths: Annotated[str, OneOf(SEGMENT_WIDTHS)] = "phase"
    # segment_widths=classes: at most this many class widths per bucket, the ladder rungs that scan the fewest slots
    # for the phase's sessions (``choose_class_widths``; each class is one more copy of the session step to
    # compile); null: every rung from K to the phase's width
    width_classes: PositiveInt | None = 3
    # where a retrain filters its eligible documents out of the counters: "host" = every counter brought to the host
    # and filtered by NumPy (faster on a 2-core CPU), "device" = filtered and compacted on the device, only the
    # eligible documents brought back (``retrain_documents``); "auto" = "device" on a GPU, else "host". Same examples
    retrain_examples: Annotated[str, OneOf(RETRAIN_EXAMPLES)] = "auto"
    # where a population's trials are set up: "host" = session draws, initial states, lane plans and every segment's
    # scan inputs made in NumPy per trial and member (``segment.host_producer``), "device" = made by jitted functions
    # of the trial keys for every trial at once, nothing moved to the device between segments (``device_trial``;
    # needs click_rng=device and segment_widths=phase); "auto" = "device" on a GPU or TPU, else "host" (on a 2-core
    # CPU the host path is as fast: docs/performance.md). Same results either way (another valid lane plan)
    trial_setup: Annotated[str, OneOf(TRIAL_SETUPS)] = "auto"

    def __post_init__(self):
        object.__setattr__(self, "initial_docs", tuple(self.initial_docs))
        check_fields(self)
        lo, hi = self.initial_docs
        if lo > hi:
            raise ConfigError("initial_docs", list(self.initial_docs), "expected [min, max] with min <= max")
        if self.entry_prob == 0 and self.sessions is None:
            raise ConfigError("entry_prob", self.entry_prob, "expected a number in (0, 1] when sessions is null "
                              "(the default session count divides by it)")
        if self.max_lanes < self.min_lanes:
            raise ConfigError("max_lanes", self.max_lanes, f"expected at least min_lanes ({self.min_lanes})")
        if self.trial_setup == "device" and self.click_rng == "host":
            raise ConfigError("trial_setup", self.trial_setup, "expected host with click_rng=host: a device set-up "
                              "draws the click uniforms in the step (click_rng=device); NumPy's would be moved to the "
                              "device every segment")
        if self.trial_setup == "device" and self.segment_widths != "phase":
            raise ConfigError("trial_setup", self.trial_setup, f"expected host with segment_widths="
                              f"{self.segment_widths}: a device set-up plans one width per bucket and phase "
                              "(segment_widths=phase)")
        if self.n_segments % self.n_updates:
            raise ConfigError("refreshes", self.refreshes, f"expected a multiple of n_updates ({self.n_updates}): "
                              "models retrain at every refreshes/n_updates-th refresh")

    @classmethod
    def from_mapping(cls, cfg) -> "SimConfig":
        """A SimConfig from a mapping (the ``sim`` block); a key it does not have is refused (``ConfigError``)."""
        return cls(**strict_fields(cls, cfg, "sim"))  # __post_init__ makes initial_docs a tuple

    def resolved(self, backend: str | None = None) -> "SimConfig":
        """This config with ``click_rng``, ``retrain_examples`` and ``trial_setup`` "auto" made concrete for
        ``backend`` (default JAX's): ``"device"`` on an accelerator (``retrain_examples`` on a GPU only; ``trial_setup``
        only with ``segment_widths=phase``), ``"host"`` on a CPU; ``trial_setup=device`` makes ``click_rng`` "auto"
        device. The runner resolves before it records the settings, so a results folder names the draws it used,
        and a rerun on another backend is refused rather than mixing them (``retrain_examples`` and ``trial_setup``
        change no result: resume ignores them)."""
        backend = backend or jax.default_backend()
        accelerator = backend in ("gpu", "tpu")
        auto = {}
        if self.click_rng == "auto":
            auto["click_rng"] = "device" if accelerator or self.trial_setup == "device" else "host"
        if self.retrain_examples == "auto":
            auto["retrain_examples"] = "device" if backend == "gpu" else "host"
        if self.trial_setup == "auto":
            device = accelerator and self.segment_widths == "phase" and auto.get("click_rng", self.click_rng) == "device"
            auto["trial_setup"] = "device" if device else "host"
        return dataclasses.replace(self, **auto) if auto else self

    @property
    def n_segments(self) -> int:
        return int(self.refreshes or self.n_updates)

    def retrains_after(self, segment: int) -> bool:
        """Whether the policy retrains after ``segment`` (never after the last one): with one segment per update,
        after every segment; with ``per`` = segments / updates > 1, after the middle segment of every ``per``
        (segments per//2, per//2 + per, ...), the UCBRank code's ``update_points = points[n_d//2::n_d]``
        (seed-code.md §2.1): 100 refreshes and 20 updates retrain after segments 2, 7, ..., 97, 20 times."""
        per = max(self.n_segments // self.n_updates, 1)
        return segment % per == per // 2 and segment < self.n_segments - 1
