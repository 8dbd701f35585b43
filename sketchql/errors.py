"""Errors shared by every room of sketchql (importable from anywhere)."""


class SketchQLError(Exception):
    """Base class of every error sketchql raises on purpose."""


class SummaryError(SketchQLError, ValueError):
    """A summary was given bad arguments (shape, dtype, NaN key, mismatch)."""


class UnsupportedOperation(SketchQLError, TypeError):
    """The summary cannot do this (e.g. subtract on a KLL sketch)."""


class LateTupleError(SketchQLError, ValueError):
    """Tuples older than the stream clock (a stream without a slack), or later than the slack with
    ``late_policy`` 'error': either way the batch is refused whole, nothing of it applied."""


class SketchQLSyntaxError(SketchQLError, ValueError):
    """A statement did not parse; carries line, column, token and expected."""

    def __init__(self, message, line=None, column=None, token=None, expected=None):
        self.line, self.column, self.token = line, column, token
        self.expected = list(expected or [])
        where = f" at line {line}, column {column}" if line is not None else ""
        super().__init__(f"{message}{where}")


class SketchQLSemanticError(SketchQLError, ValueError):
    """A statement parsed but means nothing (unknown stream, bad fade...)."""

    def __init__(self, message, line=None, column=None, token=None):
        self.line, self.column, self.token = line, column, token
        where = f" at line {line}, column {column}" if line is not None else ""
        super().__init__(f"{message}{where}")
