class CoilError(Exception):
    """Anything coil could not do: export, compile, load or run. The message says where;
    `.stage` is "trace", "export", "compile", "load" or "run" when known."""

    def __init__(self, message, stage=None):
        super().__init__(message)
        self.stage = stage


class UnsupportedError(CoilError):
    """The module uses something coil does not support. `.ops` maps each unsupported op to its
    count ({} when only a node or an argument is named, see the message)."""

    def __init__(self, message, ops=None, stage=None):
        super().__init__(message, stage)
        self.ops = dict(ops or {})
