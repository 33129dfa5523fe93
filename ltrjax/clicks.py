"""Relevance mappings, examination curves and click models (SPEC §4, baselines.md §1).

Every click model here is a pure function of explicit uniforms, so a vectorized simulation and
a one-session-at-a-time reference that share the uniforms produce the same clicks:

    clicks = sample_clicks(model, uniforms, relevance, labels)

with ``uniforms`` of shape ``[..., 2, K]`` (row 0 decides clicks, row 1 decides cascade stops).
Position-based models are written in the affine form P(c=1 | d, k) = alpha_k * R_d + beta_k:
PBM has alpha = theta, beta = 0; trust bias has alpha = theta (eps+ - eps-), beta = theta eps-.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Mapping
from typing import Annotated, Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from ltrjax.constraints import ConfigError, NonNegative, OneOf, PositiveInt, Probability, Range, check_fields

# Joachims et al. (2017) eye-tracking examination estimates for positions 1..10 (baselines.md §1.1b).
JOACHIMS_EXAMINATION = np.array([0.68, 0.61, 0.48, 0.34, 0.28, 0.20, 0.11, 0.10, 0.08, 0.06])

# TianGong-ST real click-rate matrix M[label, position] (Vectorization KDD'22; baselines.md §1.4).
TIANGONG_MATRIX = np.array(
    [
        [0.5905310300703774, 0.08679370891237413, 0.08582901120963694, 0.06621880998080615,
         0.022320057335927103, 0.00340866052266128, 0.004, 0.0023244062657908036,
         0.001467682754727632, 0.002285600715492398],
        [0.4962264150943396, 0.15181518151815182, 0.014456379881537999, 0.0669090909090909,
         0.0037186638456113354, 0.006607201850016518, 0.005154639175257732, 0.0030540432877439916,
         0.002560204816385311, 0.002573529411764706],
        [0.5416453755748595, 0.09721024998040906, 0.03520277400874416, 0.021631205673758865,
         0.01422913304972862, 0.00721659817580435, 0.011511092507325241, 0.014282757193127717,
         0.00854474398887196, 0.004123014531936465],
        [0.6114125678277612, 0.12385946512847404, 0.07420938463294896, 0.029114099542492722,
         0.055367057371992594, 0.050325850832729904, 0.004773751092583877, 0.007993605115907274,
         0.028296019900497512, 0.014935391844269173],
        [0.7420619071392911, 0.1626205520452278, 0.2419871794871795, 0.039746543778801845,
         0.013888888888888888, 0.03205128205128205, 0.008333333333333333, 0.002058264724509183,
         0.00975609756097561, 0.003931847968545216],
    ]
)

# OLTR cascade parameters (Hofmann et al.; baselines.md §1.3a), keyed by number of grades.
CASCADE_PRESETS = {
    "perfect": {5: ([0.0, 0.2, 0.4, 0.8, 1.0], [0.0] * 5), 3: ([0.0, 0.5, 1.0], [0.0] * 3),
                2: ([0.0, 1.0], [0.0, 0.0])},
    "navigational": {5: ([0.05, 0.3, 0.5, 0.7, 0.95], [0.2, 0.3, 0.5, 0.7, 0.9]),
                     3: ([0.05, 0.5, 0.95], [0.2, 0.5, 0.9]), 2: ([0.05, 0.95], [0.2, 0.9])},
    "informational": {5: ([0.4, 0.6, 0.7, 0.8, 0.9], [0.1, 0.2, 0.3, 0.4, 0.5]),
                      3: ([0.4, 0.7, 0.9], [0.1, 0.3, 0.5]), 2: ([0.4, 0.9], [0.1, 0.5])},
}


# --------------------------------------------------------------------------- relevance mappings
def relevance_ebrank(labels, y_max: int, eps_min: float = 0.1):
    """R = eps_min + (1 - eps_min) (2^y - 1) / (2^y_max - 1)  (EBRank §5.1.2, ERR-style)."""
    y = jnp.asarray(labels, jnp.float32)
    return eps_min + (1.0 - eps_min) * (2.0**y - 1.0) / (2.0**y_max - 1.0)


def relevance_linear(labels, y_max: int):
    """R = y / y_max  (UCBRank §6.1)."""
    return jnp.asarray(labels, jnp.float32) / float(y_max)


def relevance_binary(labels, threshold: int = 1, noise: float = 0.0):
    """Binarized relevance with symmetric noise: 1 - mu if y >= threshold else mu  (PRS §5.2)."""
    rel = jnp.asarray(labels) >= threshold
    return jnp.where(rel, 1.0 - noise, noise).astype(jnp.float32)


def relevance_vectorization(labels, y_max: int):
    """gamma_y = (2^y - 1) / (2^y_max - 1) on 0-based labels y in [0, y_max]  (Vectorization Eq. 13).

    The paper writes gamma_y = (2^(y-1) - 1) / (2^(y_max-1) - 1) on 1-based grades y in [1, 5]; with y' = y - 1
    that is the formula above: 3 grades [0, 1/3, 1], 5 grades [0, 1/15, 1/5, 7/15, 1]. (Putting 0-based labels
    into the 1-based formula, as this function did before, clicked label 1 like label 0.)
    """
    y = jnp.asarray(labels, jnp.float32)
    return (2.0**y - 1.0) / (2.0**y_max - 1.0)


# the released Vectorization code's trust-bias relevance (its click-model config), 5 grades only
VECTORIZATION_ERR_RELEVANCE = np.array([0.10, 0.16, 0.28, 0.52, 1.0])


class ClickModelDataMismatch(ValueError):
    """A click model or relevance mapping that the dataset's relevance grades cannot host (e.g. TianGong's
    5-grade matrix on 3-grade labels): a claim measured with it is untestable on that data."""


def relevance_vectorization_err(labels, y_max: int):
    """The released Vectorization config's ERR vector [.10, .16, .28, .52, 1.0] over 5 grades (0-based labels).

    Defined for 5-grade data only (``ClickModelDataMismatch`` otherwise).
    """
    if int(y_max) != len(VECTORIZATION_ERR_RELEVANCE) - 1:
        raise ClickModelDataMismatch(
            f"relevance 'vectorization_err' is the released Vectorization code's vector for 5 grades (labels 0-4); "
            f"this dataset's labels run 0..{int(y_max)}. Use relevance 'vectorization' (the paper's Eq. 13), "
            f"which is defined for any number of grades.")
    table = jnp.asarray(VECTORIZATION_ERR_RELEVANCE, jnp.float32)
    return table[jnp.clip(jnp.asarray(labels, jnp.int32), 0, len(VECTORIZATION_ERR_RELEVANCE) - 1)]


RELEVANCE_MAPPINGS = ("ebrank", "linear", "binary", "vectorization", "vectorization_err")


RELEVANCE_FUNCTIONS = {"ebrank": relevance_ebrank, "linear": relevance_linear, "binary": relevance_binary,
                       "vectorization": relevance_vectorization, "vectorization_err": relevance_vectorization_err}


def relevance(labels, y_max: int, mapping: str = "ebrank", **options):
    """Dispatch on the mapping name used in configs (``RELEVANCE_MAPPINGS``). ``options`` (``eps_min``,
    ``threshold``, ``noise``) go to the mapping that takes them; each default is the mapping function's own."""
    if mapping not in RELEVANCE_FUNCTIONS:
        raise ValueError(f"unknown relevance mapping {mapping!r}; expected one of {', '.join(RELEVANCE_MAPPINGS)}")
    fn = RELEVANCE_FUNCTIONS[mapping]
    takes = inspect.signature(fn).parameters
    kwargs = {k: v for k, v in {"y_max": y_max, **options}.items() if k in takes}
    return fn(labels, **kwargs)


# --------------------------------------------------------------------------- examination curves
def examination_log2(n_positions: int, eta: float = 1.0) -> np.ndarray:
    """theta_k = (1 / log2(k + 1))^eta, k = 1..K  (EBRank Eq. 8)."""
    k = np.arange(1, n_positions + 1)
    return (1.0 / np.log2(k + 1.0)) ** eta


def examination_inverse(n_positions: int, eta: float = 1.0) -> np.ndarray:
    """theta_k = (1 / k)^eta  (Joachims et al. 2017; PRS §5.2)."""
    return (1.0 / np.arange(1, n_positions + 1)) ** eta


def examination_joachims(n_positions: int, eta: float = 1.0) -> np.ndarray:
    """Joachims eye-tracking table raised to eta; positions past 10 reuse 0.06  (ULTRA)."""
    k = np.minimum(np.arange(n_positions), len(JOACHIMS_EXAMINATION) - 1)
    return JOACHIMS_EXAMINATION[k] ** eta


EXAMINATION_CURVES = {"log2": examination_log2, "inverse": examination_inverse, "joachims": examination_joachims}


def examination(curve: str, n_positions: int, eta: float = 1.0, cutoff: int | None = None) -> np.ndarray:
    """An examination curve with an optional selection cutoff k_s (theta_k = 0 for k > k_s)."""
    if curve not in EXAMINATION_CURVES:
        raise ValueError(f"unknown examination curve {curve!r}; expected one of {sorted(EXAMINATION_CURVES)}")
    theta = EXAMINATION_CURVES[curve](n_positions, eta)
    if cutoff is not None:
        theta = np.where(np.arange(n_positions) < cutoff, theta, 0.0)
    return theta


# --------------------------------------------------------------------------- click models
@struct.dataclass
class ClickModel:
    """Parameters of a click model over K displayed positions.

    ``kind`` (static) is one of ``affine`` (PBM and trust bias), ``matrix`` (P = M[label, k])
    and ``cascade`` (sequential: click with P(click|y), stop after a click with P(stop|y)).
    ``examination`` is the propensity theta_k that IPS-style counters divide by.
    """

    alpha: jax.Array  # [K]  P(c) = alpha_k R + beta_k
    beta: jax.Array  # [K]
    examination: jax.Array  # [K]  theta_k
    matrix: jax.Array  # [Y+1, K] click-rate matrix (kind == "matrix"), else zeros
    stop: jax.Array  # [Y+1] P(stop | click, y) (kind == "cascade"), else zeros
    cascade_click: jax.Array  # [Y+1] P(click | examined, y) (kind == "cascade"), else zeros
    kind: str = struct.field(pytree_node=False, default="affine")

    @property
    def n_positions(self) -> int:
        return int(self.alpha.shape[-1])


def _zeros_aux(n_positions: int, n_grades: int = 1):
    # NumPy zeros put on the device: an eager jnp.zeros (or jnp.asarray of a NumPy array) is a program to compile
    return (jax.device_put(np.zeros((n_grades, n_positions), np.float32)),
            jax.device_put(np.zeros((n_grades,), np.float32)))


def pbm(theta) -> ClickModel:
    """Position-based model: P(c=1 | d, k) = theta_k R_d."""
    theta = jnp.asarray(theta, jnp.float32)
    matrix, stop = _zeros_aux(theta.shape[0])
    return ClickModel(alpha=theta, beta=jax.device_put(np.zeros(theta.shape, np.float32)), examination=theta,
                      matrix=matrix, stop=stop, cascade_click=stop, kind="affine")


def trust_bias(theta, eps_plus, eps_minus) -> ClickModel:
    """Trust bias: P(c=1 | d, k) = theta_k [R eps+_k + (1 - R) eps-_k]  (baselines.md §1.2)."""
    theta = jnp.asarray(theta, jnp.float32)
    eps_plus = jnp.asarray(eps_plus, jnp.float32)
    eps_minus = jnp.asarray(eps_minus, jnp.float32)
    matrix, stop = _zeros_aux(theta.shape[0])
    return ClickModel(alpha=theta * (eps_plus - eps_minus), beta=theta * eps_minus, examination=theta,
                      matrix=matrix, stop=stop, cascade_click=stop, kind="affine")


def vardasbi_trust_epsilons(n_positions: int, eps_minus_scale: float = 0.65):
    """eps+_k = 1 - (k+1)/100 (frozen after k = 20), eps-_k = scale/k (frozen after k = 10)."""
    k = np.arange(1, n_positions + 1)
    eps_plus = 1.0 - (np.minimum(k, 20) + 1) / 100.0
    eps_minus = eps_minus_scale / np.minimum(k, 10)
    return eps_plus, eps_minus


def ucbrank_affine(n_positions: int = 5) -> ClickModel:
    """UCBRank's affine click model (Oosterhuis & de Rijke WSDM'21; seed-code.md §2.2).

    pos_bias = 0.35/(k+1) + 0.65/(1+0.05k), eps+ = 1/(1+0.005k), eps- = 0.65/(k+1), k 0-based.
    """
    k = np.arange(n_positions, dtype=np.float64)
    pos_bias = 0.35 / (k + 1) + 0.65 / (1 + 0.05 * k)
    eps_plus = 1.0 / (1.0 + 0.005 * k)
    eps_minus = 0.65 / (k + 1)
    return trust_bias(pos_bias, eps_plus, eps_minus)


def click_matrix(matrix=TIANGONG_MATRIX, n_positions: int | None = None) -> ClickModel:
    """Click-rate matrix model: P(c=1 | d, k) = M[y_d, k], no separate examination (Vectorization)."""
    m = np.asarray(matrix, np.float64)
    n_positions = m.shape[1] if n_positions is None else n_positions
    if n_positions > m.shape[1]:
        raise ValueError(f"click matrix has {m.shape[1]} positions; a list of {n_positions} would index past it")
    m = m[:, :n_positions]
    ones = jnp.ones((n_positions,), jnp.float32)
    return ClickModel(alpha=jnp.zeros_like(ones), beta=jnp.zeros_like(ones), examination=ones,
                      matrix=jnp.asarray(m, jnp.float32), stop=jnp.zeros((m.shape[0],), jnp.float32),
                      cascade_click=jnp.zeros((m.shape[0],), jnp.float32), kind="matrix")


def cascade(click_prob, stop_prob, n_positions: int) -> ClickModel:
    """Cascade: walk down the list, click with P(click|y), stop after a click with P(stop|y)."""
    ones = jnp.ones((n_positions,), jnp.float32)
    click_prob = jnp.asarray(click_prob, jnp.float32)
    return ClickModel(alpha=jnp.zeros_like(ones), beta=jnp.zeros_like(ones), examination=ones,
                      matrix=jnp.zeros((click_prob.shape[0], n_positions), jnp.float32),
                      stop=jnp.asarray(stop_prob, jnp.float32), cascade_click=click_prob, kind="cascade")


def click_prob(model: ClickModel, relevance, labels):
    """Marginal click probability per displayed position (``[..., K]``) for position-based models.

    For a cascade this is the click probability *given the position is reached*.
    """
    if model.kind == "affine":
        return model.alpha * relevance + model.beta
    if model.kind == "matrix":
        k = jnp.arange(model.n_positions)
        return model.matrix[jnp.clip(labels, 0, model.matrix.shape[0] - 1), k]
    if model.kind == "cascade":
        return model.cascade_click[jnp.clip(labels, 0, model.cascade_click.shape[0] - 1)]
    raise ValueError(f"unknown click model kind {model.kind!r}")


def sample_clicks(model: ClickModel, uniforms, relevance, labels, valid=None):
    """Clicks (bool ``[..., K]``) for displayed documents, from explicit uniforms ``[..., 2, K]``.

    ``valid`` masks empty display slots (no click there).
    """
    p = click_prob(model, relevance, labels)
    clicks = uniforms[..., 0, :] < p
    if valid is not None:  # before the cascade: an empty slot can neither be clicked nor stop the walk
        clicks = clicks & valid
    if model.kind == "cascade":
        stop_p = model.stop[jnp.clip(labels, 0, model.stop.shape[0] - 1)]
        stops_here = clicks & (uniforms[..., 1, :] < stop_p)
        # reached_k = no stop at any earlier position (paper semantics: stop only after a click)
        stopped_before = jnp.cumsum(stops_here, axis=-1) - stops_here
        clicks = clicks & (stopped_before == 0)
    return clicks


def affine_terms(model: ClickModel):
    """Per-position (alpha_k, beta_k) for the affine correction Delta = (C - sum beta)/sum alpha.

    Defined for affine models; for the others alpha = theta, beta = 0 (plain IPS).
    """
    if model.kind == "affine":
        return model.alpha, model.beta
    return model.examination, jnp.zeros_like(model.examination)


# --------------------------------------------------------------------------- from config
# the keys each kind reads (besides ``kind``); a key another kind reads is refused (ltrjax.schema)
KIND_KEYS = {
    "pbm": ("examination", "eta", "cutoff"),
    "trust_bias": ("examination", "eta", "cutoff", "eps_minus_scale"),
    "ucbrank_affine": (),
    "tiangong": (),
    "cascade": ("preset", "n_grades"),
    "matrix": ("matrix",),
}


def click_model_kinds() -> tuple[str, ...]:
    return tuple(KIND_KEYS)


@dataclasses.dataclass(frozen=True)
class ClickModelConfig:
    """A click model's settings, typed, with the one set of defaults online and offline share: the schema of a
    ``conf/click_model/*.yaml`` mapping (``ltrjax.schema``) and the base of the offline experiment's
    ``click_model`` (``ltrjax.offline.config.OfflineClickModel``, which adds the logged relevance mapping).
    ``make_click_model`` builds the model from it."""

    kind: Annotated[str, OneOf(click_model_kinds)] = "pbm"
    examination: Annotated[str, OneOf(EXAMINATION_CURVES)] = "log2"
    eta: NonNegative = 1.0
    cutoff: PositiveInt | None = None  # selection cutoff k_s: theta_k = 0 below it
    eps_minus_scale: Probability = 0.65  # trust bias eps-_k = scale / k
    preset: Annotated[str, OneOf(CASCADE_PRESETS)] = "navigational"  # cascade
    n_grades: Annotated[int | None, Range(2)] = None  # cascade: null = the dataset's y_max + 1
    matrix: list[list[float]] | None = None  # kind matrix: click rates M[label, position]

    def __post_init__(self):
        check_fields(self)
        if self.kind == "matrix" and not self.matrix:
            raise ConfigError("matrix", self.matrix, "expected a list of rows M[label][position] for kind matrix")

    def settings(self) -> dict:
        """``kind`` and the keys this kind reads (``KIND_KEYS``): what a run records of its click model
        (``resolved_config.yaml``, each row's settings in results.json)."""
        return {"kind": self.kind, **{k: getattr(self, k) for k in KIND_KEYS[self.kind]}}


# the relevance mapping of logged clicks (offline's ``click_model.relevance``, ``threshold``, ``noise``): read by
# ``relevance``, not by the click model, so a click model built from an offline mapping leaves them out
RELEVANCE_KEYS = ("relevance", "threshold", "noise")


def click_model_config(cfg: ClickModelConfig | Mapping[str, Any] | None) -> ClickModelConfig:
    """``cfg`` typed: a ``ClickModelConfig`` (or the offline subclass) as it is; a mapping (a YAML's, the Python API's)
    converted once, its relevance keys (``RELEVANCE_KEYS``) aside and any other unknown key refused (``ConfigError``);
    None: the defaults."""
    if isinstance(cfg, ClickModelConfig):
        return cfg
    known = {f.name for f in dataclasses.fields(ClickModelConfig)}
    values = {k: v for k, v in dict(cfg or {}).items() if k not in RELEVANCE_KEYS}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ConfigError(f"click_model.{unknown[0]}", values[unknown[0]],
                          f"expected a key of the click model ({', '.join(sorted(known))})")
    return ClickModelConfig(**values)


def _relevance_name(cfg) -> str | None:
    """The relevance mapping an offline click model (typed or a mapping) names, else None."""
    if isinstance(cfg, Mapping):
        return cfg["relevance"] if "relevance" in cfg else None
    return getattr(cfg, "relevance", None)


def check_click_model_data(cfg: ClickModelConfig | Mapping[str, Any] | None, y_max: int) -> None:
    """Raise ``ClickModelDataMismatch`` when the dataset's grades 0..``y_max`` cannot host click model ``cfg``.

    TianGong's matrix has one row per grade 0-4; on data with fewer grades the labels would use rows 0..y_max
    only, and those carry no relevance signal (on rows 0-2 label 2 is clicked *less* than label 0 at positions
    1, 3, 4 and 5), so every click estimator would learn nothing and a claim measured so is untestable.
    """
    n_grades = TIANGONG_MATRIX.shape[0]
    if click_model_config(cfg).kind == "tiangong" and int(y_max) + 1 < n_grades:
        raise ClickModelDataMismatch(
            f"click_model tiangong: the TianGong-ST matrix has {n_grades} relevance grades (rows 0-{n_grades - 1}), "
            f"but this dataset's labels run 0..{int(y_max)} ({int(y_max) + 1} grades); its rows 0-{int(y_max)} carry "
            f"no relevance signal (label 2 is clicked less than label 0 at positions 1, 3, 4 and 5), so TianGong "
            f"clicks cannot be simulated on this data. Use a dataset with {n_grades} grades or another click model.")
    if _relevance_name(cfg) == "vectorization_err":
        relevance_vectorization_err(np.zeros(1, np.int32), y_max)


def make_click_model(cfg: ClickModelConfig | Mapping[str, Any] | None, n_positions: int,
                     y_max: int | None = None) -> ClickModel:
    """Build the click model of ``cfg`` (``click_model_config``: typed, or a ``conf/click_model/*.yaml`` mapping).

    ``y_max`` (the dataset's top grade) picks the cascade preset's grade count when the config leaves
    ``n_grades`` null, and refuses a model the data cannot host (``check_click_model_data``).
    """
    cm = click_model_config(cfg)
    if cm.kind in ("pbm", "trust_bias"):
        theta = examination(cm.examination, n_positions, cm.eta, cm.cutoff)
        if cm.kind == "pbm":
            return pbm(theta)
        return trust_bias(theta, *vardasbi_trust_epsilons(n_positions, cm.eps_minus_scale))
    if cm.kind == "ucbrank_affine":
        return ucbrank_affine(n_positions)
    if cm.kind == "tiangong":
        if y_max is not None:
            check_click_model_data(cm, y_max)
        return click_matrix(TIANGONG_MATRIX, n_positions)
    if cm.kind == "matrix":  # an explicit M[label, position], e.g. a vector EH M = R O^T (ltrjax.offline.fidelity)
        return click_matrix(np.asarray(cm.matrix, np.float64), n_positions)
    n_grades = int(cm.n_grades or (y_max + 1 if y_max is not None else 5))  # cascade
    try:
        p_click, p_stop = CASCADE_PRESETS[cm.preset][n_grades]
    except KeyError as err:
        raise ValueError(f"no cascade preset {cm.preset!r} for {n_grades} grades") from err
    return cascade(p_click, p_stop, n_positions)
