"""What a reader sees is named as the user names it (issue 43): a run's results.md names the click model by the
``click_model=`` choice that makes it (``ebrank_pbm``, whose kind is ``pbm``), and ``print(queryset)`` is one line."""

from __future__ import annotations

import numpy as np
from hydra import compose, initialize_config_dir

from ltrjax.data.toy import toy_queryset
from ltrjax.report.online_report import click_model_name, click_model_text
from ltrjax.schema import resolve
from ltrjax.structured import conf_dir


def test_every_shipped_click_model_is_named_by_its_config_choice():
    names = sorted(p.stem for p in (conf_dir() / "click_model").glob("*.yaml"))
    assert "ebrank_pbm" in names
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        for name in names:
            cm = resolve(compose("config", overrides=[f"click_model={name}"])).click_model.settings()
            assert click_model_name(cm) == name, (name, cm)
            assert click_model_text(cm, "").startswith(f"`click_model={name}` ({cm['kind']}")


def test_a_click_model_no_file_names_is_shown_by_kind_and_options():
    cm = {"kind": "pbm", "examination": "log2", "eta": 2.0, "cutoff": None}  # ebrank_pbm with another eta
    assert click_model_name(cm) is None
    assert click_model_text(cm, "examination log2, eta 2") == "pbm, examination log2, eta 2"


def test_queryset_repr_is_one_short_line():
    qs = toy_queryset(n_queries=30, n_features=7)
    text = repr(qs)
    assert "\n" not in text and len(text) < 200 and "array" not in text
    per_split = "/".join(str(int(np.sum(qs.split == s))) for s in range(3))
    assert f"{qs.n_queries} queries (train/vali/test {per_split})" in text
    assert f"{qs.n_docs} documents, 7 features" in text and str(qs) == text
