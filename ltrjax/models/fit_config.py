"""The settings every fit of ltrjax has, defined once; each use gives them its own defaults.

``FitFields`` declares the fields that the online retraining fits (``ltrjax.models.train.FitConfig``, an
algorithm's ``fit`` block) and the offline estimators' fits (``ltrjax.offline.train.TrainConfig``,
``experiment.train``) share: the optimiser (``ltrjax.models.optim.optimizer_of`` reads them) and the stop rule's
budget (``ltrjax.models.fit_loop.Rule``). It has no defaults: a use subclasses it and names its defaults as class
keywords, next to its own extra fields, so each default is written once, in the dataclass of the package that
reads it::

    @dataclasses.dataclass(frozen=True)
    class TrainConfig(FitFields, block="train", batch_size=64, ...):
        eval_every: PositiveInt = 1

A use may also redeclare a shared field in its body where it accepts other values (the online fits also take
``optimizer="lbfgs"``). Validation (``check_fields``) and ``from_mapping`` (unknown keys refused) are the same for
every use; Hydra/OmegaConf see a plain frozen dataclass (``ltrjax.schema`` stores each use's class).
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Annotated

from ltrjax.constraints import NonNegative, NonNegativeInt, OneOf, Positive, PositiveInt, check_fields, strict_fields
from ltrjax.models import optim


def optimizer_names() -> tuple[str, ...]:
    """The minibatch optimizers every fit accepts (``ltrjax.models.optim``)."""
    return tuple(optim.OPTIMIZERS)


@dataclasses.dataclass(frozen=True)
class FitFields:
    """The fields every fit has (see the module docstring); subclass it with ``block=`` and one default per field."""

    optimizer: Annotated[str, OneOf(optimizer_names)]
    learning_rate: Positive
    batch_size: PositiveInt
    max_epochs: NonNegativeInt  # epochs at most
    patience: NonNegativeInt  # validations without improvement tolerated (each use says how it counts them)
    min_epochs: NonNegativeInt  # epochs trained before the rule may stop
    clip_norm: Positive | None  # global-norm gradient clipping (None: none)
    weight_decay: NonNegative  # decoupled weight decay

    block = "fit"  # the config block a use is read from, for messages (not a field)

    def __init_subclass__(cls, block: str | None = None, **defaults):
        super().__init_subclass__()
        if block is not None:
            cls.block = block
        hints = typing.get_type_hints(FitFields, include_extras=True)
        shared = [f.name for f in dataclasses.fields(FitFields)]
        unknown = sorted(set(defaults) - set(shared))
        if unknown:
            raise TypeError(f"{cls.__name__}: {unknown} are not fields of FitFields ({shared})")
        own = cls.__dict__.get("__annotations__")
        if own is None:
            own = {}
            cls.__annotations__ = own
        for name, value in defaults.items():
            if name in own:
                raise TypeError(f"{cls.__name__}.{name}: a default given both as a class keyword and in the body")
            own[name] = hints[name]  # the shared declaration, with its constraints
            setattr(cls, name, value)
        missing = [n for n in shared if n not in defaults and not (n in own and hasattr(cls, n))]
        if missing:
            raise TypeError(f"{cls.__name__}: no default for the shared fit fields {missing}")

    def __post_init__(self):
        check_fields(self)

    @classmethod
    def from_mapping(cls, mapping):
        """An instance from a mapping of its fields (``fit`` / ``train`` block); a key it does not have is refused
        (``ConfigError``)."""
        return cls(**strict_fields(cls, mapping, cls.block))
