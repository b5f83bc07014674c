"""The errors a user can act on: the command line prints each as one line, never as a traceback."""

from __future__ import annotations


class UserError(Exception):
    """A mistake or a stop the user can act on; the CLI prints it as one line, never as a traceback."""


class InputError(UserError):
    """A problem with a user's file or argument."""


class SettingError(InputError, ValueError):
    """A setting that cannot be used, said in the API's words (`layer 4 is out of range ...`); the command
    line says the same of its flag (`--layer 4 ...`). A ValueError, as Python's convention has a bad value."""

    def __init__(self, setting: str, detail: str, flag: str | None = None):
        super().__init__(f"{setting} {detail}")
        self.setting, self.detail, self.flag = setting, detail, flag

    def as_flag(self) -> str:
        """The command line's words: the flag the setting is (or `flag`, where it is not the setting's own name)."""
        return f"{self.flag or '--' + self.setting.replace('_', '-')} {self.detail}"
