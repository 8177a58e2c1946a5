"""The command lines' usage errors: one line that names the flag and its rule, then a short hint.

argparse's own ``error`` prints the whole usage (every flag) before the message, and the
library's messages name settings as Python does (``min_load_gap``); a user typed a flag.
"""

from __future__ import annotations

import argparse
import re
import sys
from typing import Any, Dict, List, NoReturn, Optional

__all__ = ["SERVE_HINT", "CommandParser"]

#: What a usage error of the serve commands shows after its one line: the flags every run needs.
SERVE_HINT = "--worker-urls URL [URL ...] [--port PORT] [--policy NAME] [...]"


class CommandParser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are ``PROG: error: MESSAGE`` with the settings named
    as their flags (``--min-load-gap``), then ``hint`` (the few flags every run needs), exit 2.

    Also the class of its subparsers, which take the same keywords. ``settings`` names the
    flag of a library setting that no destination is called (``{"metrics_port":
    "--prometheus-port"}``).
    """

    def __init__(self, *args: Any, hint: str = "", settings: Optional[Dict[str, str]] = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.hint = hint
        self.settings = dict(settings or {})
        self.typed: List[str] = []  # the arguments parsed last, to name the flag of a setting as typed

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        self.typed = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args(args, namespace)

    def flag_names(self) -> Dict[str, str]:
        """The long flag of each destination that is a multi-word name (``min_load_gap``): the
        one typed last when it has several (``--block-size`` for ``--prefix-block-size``), as
        argparse keeps the last value, else its first; and the flag of each of ``settings``."""
        dests = {option: action.dest for action in self._actions for option in action.option_strings}
        names: Dict[str, str] = {}
        for option, dest in dests.items():
            if "_" in dest and option.startswith("--"):
                names.setdefault(dest, option)
        for arg in self.typed:
            option = self._typed_option(arg.split("=", 1)[0], dests)
            if option and dests[option] in names and option.startswith("--"):
                names[dests[option]] = option
        names.update(self.settings)
        return names

    def _typed_option(self, typed: str, options: Dict[str, str]) -> Optional[str]:
        """The option of ``options`` that ``typed`` stands for: itself, or the one it abbreviates,
        as argparse takes an unambiguous prefix."""
        if typed in options:
            return typed
        if not (self.allow_abbrev and typed.startswith("--")):
            return None
        found = [o for o in options if o.startswith(typed)]
        return found[0] if len(found) == 1 else None

    def in_flags(self, message: str) -> str:
        """``message`` with every setting that is a flag of this parser named as the flag."""
        names = self.flag_names()
        if not names:
            return message
        pattern = r"\b(%s)\b" % "|".join(re.escape(name) for name in sorted(names, key=len, reverse=True))
        return re.sub(pattern, lambda found: names[found.group(1)], message)

    def error(self, message: str) -> NoReturn:
        hint = "usage: %s %s (--help: every flag)" % (self.prog, self.hint) if self.hint else self.format_usage().strip()
        sys.stderr.write("%s: error: %s\n%s\n" % (self.prog, self.in_flags(message), hint))
        sys.exit(2)
