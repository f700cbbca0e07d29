"""The lab's one exception type; `exit_code` 2 means "fix the machine first"."""

from __future__ import annotations


class LabError(RuntimeError):
    def __init__(self, message: str, exit_code: int = 1):
        super().__init__(message)
        self.exit_code = exit_code
