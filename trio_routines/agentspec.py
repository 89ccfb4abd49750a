"""What an agent spec names, apart from the agents themselves (agents.py): a ``py:`` agent
loaded from its module, and any spec as safe to log."""

from __future__ import annotations

import importlib
import re
import shlex
from typing import Any

from .agent import Agent
from .errors import AgentUnavailable, InvalidAgent


def load_python_agent(target: str) -> Agent:
    """The agent named by ``<module>:<attribute>`` (the attribute may be dotted)."""
    module_name, sep, attribute = target.partition(":")
    if not sep or not module_name or not attribute:
        raise InvalidAgent(f'"py:{target}" must name a module and an attribute: py:module:attr')
    try:
        module = importlib.import_module(module_name)
    except (Exception, SystemExit) as exc:  # SystemExit: a module that exits as it loads
        raise AgentUnavailable(
            f'cannot import module "{module_name}" for py: agent: {_failed(exc)}'
        ) from None
    obj: Any = module
    for part in attribute.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise InvalidAgent(f'module "{module_name}" has no attribute "{attribute}"') from None
    if isinstance(obj, type) or (callable(obj) and not hasattr(obj, "invoke")):
        try:
            obj = obj()
        except (Exception, SystemExit) as exc:  # SystemExit: py:sys:exit ended the process
            raise AgentUnavailable(
                f'"py:{target}" could not be built with no arguments: {_failed(exc)}'
            ) from None
    if not callable(getattr(obj, "invoke", None)):
        raise InvalidAgent(f'"py:{target}" is not an agent (it has no invoke method)')
    agent: Agent = obj
    return agent


def _failed(exc: BaseException) -> str:
    """What a failed import or build says: an exit, or the error's own words."""
    if isinstance(exc, SystemExit):
        return f"it exited (SystemExit {exc.code!r})"
    return str(exc)


def _command_program(command: str) -> str:
    """``cmd:<program> …``: what runs, never its arguments or its environment assignments
    (``KEY=secret ./agent --token x``), where secrets are passed; ``cmd:…`` when no program
    can be told apart (a quote left open, a shell construct first)."""
    try:
        words = shlex.split(command)
    except ValueError:
        words = command.split()
    while words and _ASSIGNMENT.match(words[0]):
        words.pop(0)
    if not words or not _PROGRAM.fullmatch(words[0]):
        return "cmd:…"
    return f"cmd:{words[0]}" + (" …" if len(words) > 1 else "")


_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
# A program as a person names one: a path or a name, nothing that could be a credential's
# punctuation (a URL with a password, a header) nor a control character.
_PROGRAM = re.compile(r"[A-Za-z0-9_./+-]{1,200}")


def describe_agent(spec: str) -> str:
    """``spec`` as safe to log: a command by its program alone (``cmd:/opt/agent/run …``), a
    URL by its origin and path, no query."""
    text = spec.strip()
    if text.startswith("cmd:"):
        return _command_program(text[4:])
    if text.lower().startswith(("http://", "https://")):
        scheme, _, rest = text.partition("://")
        rest = rest.partition("?")[0].partition("#")[0]
        host, slash, path = rest.partition("/")
        return f"{scheme}://{host.rpartition('@')[2]}{slash}{path}"
    return text
