"""Errors raised by the data layer: malformed files and missing datasets."""

from __future__ import annotations


class DataFormatError(ValueError):
    """A line of a LETOR/SVMlight file does not have the expected form.

    ``str(e)`` reads ``"{path}:{line}: expected {expected}, got {got!r}"``; ``line`` is 1-based.
    """

    def __init__(self, path: str, line: int, expected: str, got: str) -> None:
        self.path = str(path)
        self.line = int(line)
        self.expected = expected
        self.got = got
        super().__init__(f"{self.path}:{self.line}: expected {expected}, got {got!r}")

    def __reduce__(self):
        return (type(self), (self.path, self.line, self.expected, self.got))


class DatasetNotFoundError(FileNotFoundError):
    """A dataset's files are not where the configuration says; ``str(e)`` is one paragraph
    naming the dataset, the expected path and layout, how to point elsewhere, and the publisher."""

    def __init__(
        self,
        dataset: str,
        path: str,
        *,
        reason: str,
        layout: str,
        path_env: str | None,
        published: str | None,
    ) -> None:
        self.dataset = dataset
        self.path = str(path)
        self.reason = reason
        self.layout = layout
        self.path_env = path_env
        self.published = published
        where = f"set ${path_env}=/path/to/data or " if path_env else ""
        source = f" Where to get it: {published}." if published else ""
        message = (
            f"Dataset '{dataset}' was not found: {reason}. "
            f"Expected layout: {layout}. "
            f"To use a copy elsewhere, {where}override the config key dataset.path "
            f"(e.g. `python -m ltrjax.run +dataset={dataset} dataset.path=/path/to/data`).{source}"
        )
        super().__init__(message)

    def __reduce__(self):
        return (
            _rebuild_not_found,
            (self.dataset, self.path, self.reason, self.layout, self.path_env, self.published),
        )


def _rebuild_not_found(dataset, path, reason, layout, path_env, published) -> DatasetNotFoundError:
    return DatasetNotFoundError(
        dataset, path, reason=reason, layout=layout, path_env=path_env, published=published
    )


class DataCheckError(DataFormatError):
    """Data that parses but cannot be used as configured (a split without a relevant document, no query
    long enough, a truncated compressed file, ...); ``str(e)`` is one paragraph naming ``where`` (a file
    or ``dataset NAME, split S``), what is wrong with the counts, and what to change.

    A subclass of ``DataFormatError`` so that every caller that reports bad data (``python -m ltrjax.run``
    exits 2 with the message) reports these too; ``line`` is 0 (no one line is at fault).
    """

    def __init__(self, where: str, problem: str, hint: str = "") -> None:
        self.where, self.problem, self.hint = str(where), problem, hint
        ValueError.__init__(self, f"{self.where}: {problem}" + (f"; {hint}" if hint else ""))
        self.path, self.line, self.expected, self.got = self.where, 0, problem, ""

    def __reduce__(self):
        return (type(self), (self.where, self.problem, self.hint))
