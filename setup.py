"""Packaging beyond what pyproject.toml can say: the top-level ``conf/`` ships inside the package as ``ltrjax.conf``
(its YAML files are package data, pyproject.toml), so an installed ltrjax finds its configs (``ltrjax.structured.conf_dir``)."""

from setuptools import find_namespace_packages, setup

PACKAGE_DIR = {"ltrjax.conf": "conf"}


def packages() -> list[str]:
    """ltrjax and every folder below it (some have no __init__.py), and conf/ and its folders as ltrjax.conf.*"""
    found = find_namespace_packages(include=["ltrjax", "ltrjax.*"])
    conf = [f"ltrjax.conf.{p}" for p in find_namespace_packages(where="conf")]
    return [p for p in (*found, "ltrjax.conf", *conf) if "__pycache__" not in p]


if __name__ == "__main__":  # as setuptools' build backend runs it
    setup(packages=packages(), package_dir=PACKAGE_DIR)
