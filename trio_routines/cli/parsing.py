"""The argument parser's own class: its complaints on one line, with a hint where a word that
begins with a dash was meant as a name or a value; and an option that says it was given."""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from typing import NoReturn

from ..text import shell_option, shell_word, shown

#: argparse's complaint of an option given no value (``--session -x``: -x read as an option).
_WANTS_VALUE = re.compile(r"argument (--[\w-]+)(?:/-\w)?: expected one argument")


class Parser(argparse.ArgumentParser):
    """argparse, with its complaints on one line (exit status 2)."""

    _given: Sequence[str] = ()

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        self._given = list(sys.argv[1:] if args is None else args)  # for error()'s hint
        return super().parse_known_args(args, namespace)

    def error(self, message: str) -> NoReturn:
        self.exit(
            2, f"{self.prog}: error: {shown(message)}{self._dash_hint(message)} (see --help)\n"
        )

    def _dash_hint(self, message: str) -> str:
        """For a missing name where a word no option is began with a dash (a routine file
        ``-daily.md``), or an option's missing value where the next word did (a session
        ``-x``): how to give it."""
        wanted = _WANTS_VALUE.fullmatch(message)
        if wanted is not None:
            flag = wanted[1]
            following = self._given[self._given.index(flag) + 1 :] if flag in self._given else []
            if following and following[0].startswith("-") and len(following[0]) > 1:
                return (
                    " — a value that begins with a dash goes after =, as in "
                    f"{shell_option(flag, following[0])}"
                )
            return ""
        missing = message.partition("the following arguments are required: ")[2]
        if not any(not wanted.startswith("-") for wanted in missing.split(", ") if wanted):
            return ""  # no name is missing: a dashed word is no name given wrongly
        for word in self._given:
            if word == "--":
                break
            option = word.split("=", 1)[0]
            known = any(flag.startswith(option) for flag in self._option_string_actions)
            if len(word) > 1 and word.startswith("-") and not known:
                return (
                    f" — if {shell_word(word)} is a name, give it after --, as in "
                    f"{self.prog} -- {shell_word(word)}"
                )
        return ""


class Given(argparse.Action):
    """Store the value, and that it was given (``<dest>_given``): a default cannot say so."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        setattr(namespace, self.dest, values)
        setattr(namespace, f"{self.dest}_given", True)
