"""The routines directory: every ``<name>.md`` file in it loaded, each broken one isolated.

This is the only part of reading routines that touches the file system (the text of one file
is parsed by :func:`trio_routines.routines.parse_routine_text`, which is pure). It owns what a
directory entry may be -- a regular UTF-8 file of at most :data:`MAX_ROUTINE_FILE_BYTES`, with
a safe name, not a symlink leading out -- and turns every file that fails into a
:class:`RoutineFailure`, so that its siblings still load. Whether a failure is fatal
(``serve``) or merely reported (read-only commands) is the caller's decision.
"""

from __future__ import annotations

import os
import stat
import unicodedata

import attrs

from .errors import InvalidRoutine, UnsafeName
from .names import name_problem
from .routines import Routine, parse_routine_text
from .text import name_shown

__all__ = [
    "MAX_ROUTINE_FILE_BYTES",
    "LoadResult",
    "RoutineFailure",
    "find_routine",
    "load_routines",
]

#: A routine file larger than this is refused unread: a prompt is text a person writes, and a
#: huge file is far more likely a mistake (a log, a binary) than a routine.
MAX_ROUTINE_FILE_BYTES = 256 * 1024

_SUFFIX = ".md"


@attrs.frozen(kw_only=True)
class RoutineFailure:
    """A routine file that did not load: its label (``routines/daily.md``) and why."""

    file: str
    reason: str

    def __str__(self) -> str:
        return f"{self.file}: {self.reason}"


@attrs.frozen(kw_only=True)
class LoadResult:
    """Every routine that loaded (sorted by name) and every file that did not."""

    routines: tuple[Routine, ...] = ()
    failures: tuple[RoutineFailure, ...] = ()
    #: The entries passed over that a person may have meant as routines: files (not
    #: subdirectories) whose names do not end in ``.md`` (``daily.toml``), hidden or not
    #: (``.daily.md``), but for hidden ones of other names (``.no-routines``, ``.swp`` files).
    others: tuple[str, ...] = ()


#: How many of the files passed over :func:`passed_over` names (the rest are counted).
OTHERS_SHOWN = 5


def passed_over(others: tuple[str, ...]) -> str:
    """The files of a routines directory a load passed over (:attr:`LoadResult.others`), as
    ``check`` and ``serve`` say them: a routine is a ``<name>.md`` file."""
    names = [
        '"' + name_shown(os.fsencode(name).decode("utf-8", "backslashreplace"))[:64] + '"'
        for name in others
    ]
    more = len(names) - OTHERS_SHOWN
    listed = ", ".join(names[:OTHERS_SHOWN]) + (f" and {more} more" if more > 0 else "")
    return f"passed over (a routine file is named <name>.md): {listed}"


def find_routine(result: LoadResult, name: str) -> Routine | None:
    """The loaded routine called ``name``, or ``None``."""
    for routine in result.routines:
        if routine.name == name:
            return routine
    return None


def load_routines(directory: str | os.PathLike[str]) -> LoadResult:
    """Load every ``<name>.md`` routine file directly inside ``directory``.

    An absent directory holds no routines (and is no failure); a path that is not a directory,
    or a directory that cannot be listed, raises :class:`InvalidRoutine`. Files starting with
    ``.`` are ignored (editor droppings), except ``.md``, ``..md`` and ``...md``, whose names
    are reported as unsafe rather than silently skipped (the others, ``.daily.md``, are listed
    with the files passed over). Subdirectories of other names are ignored, and so are files of
    other names, which :attr:`LoadResult.others` lists (``check`` and ``serve`` name them).
    Every other ``*.md`` entry either loads or becomes a :class:`RoutineFailure`: an unsafe or
    non-UTF-8 name, a symlink leading outside ``directory``, anything but a regular file (a
    directory named ``<name>.md`` too: one that replaced a routine's file keeps the version
    loaded before, as every broken file does on a reload), a file over
    :data:`MAX_ROUTINE_FILE_BYTES`, text that is not UTF-8, an OS error, or a parse error.
    """
    base = os.fspath(directory)
    try:
        is_dir = stat.S_ISDIR(os.stat(base).st_mode)
    except FileNotFoundError:
        return LoadResult()
    except OSError as exc:
        raise InvalidRoutine(f"{base}: cannot read the routines directory: {_why(exc)}") from exc
    if not is_dir:
        raise InvalidRoutine(f"{base}: the routines directory is not a directory")
    # One directory, opened once, every entry read through it: a routines directory reached
    # through a symlink switched during the load (``current -> releases/N``) is read whole
    # from the one it led to when the load began.
    try:
        folder = os.open(base, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise InvalidRoutine(f"{base}: cannot list the routines directory: {_why(exc)}") from exc
    try:
        try:
            entries = sorted(os.listdir(folder))
        except OSError as exc:
            raise InvalidRoutine(
                f"{base}: cannot list the routines directory: {_why(exc)}"
            ) from exc
        return _load_entries(_Folder(folder, base), entries)
    finally:
        os.close(folder)


@attrs.frozen
class _Folder:
    """The routines directory, open: its descriptor, its name as given, its real path."""

    fd: int
    base: str
    real: str = attrs.field()

    @real.default
    def _real(self) -> str:
        return _opened_path(self.fd) or os.path.realpath(self.base)

    def outside(self) -> InvalidRoutine:
        """The refusal of an entry that leads out of this directory."""
        return InvalidRoutine(f"is a symlink leading outside {self.base}")


def _load_entries(folder: _Folder, entries: list[str]) -> LoadResult:
    routines: list[Routine] = []
    failures: list[RoutineFailure] = []
    others: list[str] = []
    for entry in entries:
        if not entry.endswith(_SUFFIX):
            if not entry.startswith(".") and not _is_dir(folder, entry):
                others.append(entry)
            continue
        name = entry[: -len(_SUFFIX)]
        if entry.startswith(".") and name not in ("", ".", ".."):
            if not _is_dir(folder, entry):
                others.append(entry)  # hidden: perhaps on purpose, said all the same
            continue
        label = os.path.join(folder.base, entry)
        try:
            routine = _load_one(folder, entry, name)
        except (InvalidRoutine, UnsafeName) as exc:
            failures.append(RoutineFailure(file=label, reason=str(exc)))
        else:
            routines.append(routine)
    routines, alike = _apart(routines, folder.base)
    failures.extend(alike)
    failures.sort(key=lambda failure: failure.file)
    routines.sort(key=lambda r: r.name)
    return LoadResult(routines=tuple(routines), failures=tuple(failures), others=tuple(others))


def _apart(routines: list[Routine], base: str) -> tuple[list[Routine], list[RoutineFailure]]:
    """The routines whose names no other's reads as, and a failure for each of those that
    do: names that differ only in letter case (``Daily``, ``daily``) or in how Unicode
    composes a character (``café`` written with one code point or two) look the same in every
    listing and on the status page, and are one name on a case-insensitive file system (a
    state directory's claims would be shared)."""
    groups: dict[str, list[Routine]] = {}
    for routine in routines:
        groups.setdefault(unicodedata.normalize("NFC", routine.name).casefold(), []).append(routine)
    kept: list[Routine] = []
    failures: list[RoutineFailure] = []
    for group in groups.values():
        if len(group) == 1:
            kept.extend(group)
            continue
        for routine in group:
            others = ", ".join(_told(other.name) for other in group if other is not routine)
            failures.append(
                RoutineFailure(
                    file=os.path.join(base, routine.name + _SUFFIX),
                    reason=f"its name{_composed(routine.name)} reads as that of {others} (they "
                    "differ only in letter case or in how a character is composed) — rename one",
                )
            )
    return kept, failures


def _composed(name: str) -> str:
    """How ``name`` is written, when its characters are composed otherwise than Unicode's
    usual form (NFC): the combining marks escaped, which a listing shows as the same text."""
    if unicodedata.is_normalized("NFC", name):
        return ""
    marks = "".join(f"\\u{ord(c):04x}" if unicodedata.combining(c) else c for c in name)
    return f" (written {marks})"


def _told(name: str) -> str:
    """``<name>.md`` for a message, with how it is written if it is not the usual form."""
    return f"{name}{_SUFFIX}{_composed(name)}"


def _is_dir(folder: _Folder, entry: str) -> bool:
    try:
        return stat.S_ISDIR(os.stat(entry, dir_fd=folder.fd).st_mode)
    except OSError:
        return False


def _load_one(folder: _Folder, entry: str, name: str) -> Routine:
    """One file's routine, or an error to report."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        # os.listdir smuggles undecodable bytes in as lone surrogates; such a name could not
        # be written to JSON, logs or HTTP later, so refuse it here where the author sees it.
        raise InvalidRoutine("the file name is not UTF-8") from None
    problem = name_problem(name)
    if problem is not None:
        raise UnsafeName(problem)
    real_base = folder.real
    try:
        if stat.S_ISLNK(os.lstat(entry, dir_fd=folder.fd).st_mode):
            target = os.path.realpath(os.path.join(real_base, entry))
            if os.path.commonpath([real_base, target]) != real_base:
                raise folder.outside()
        try:
            mode = os.stat(entry, dir_fd=folder.fd).st_mode
        except FileNotFoundError:
            raise InvalidRoutine("is a broken symlink") from None
        if stat.S_ISDIR(mode):
            # Named as a routine file is: the routine it replaced, or a name meant as one.
            raise InvalidRoutine("is a directory, not a routine file")
        if not stat.S_ISREG(mode):
            raise InvalidRoutine("is not a regular file")
        data = _read_capped(folder, entry)
    except OSError as exc:
        raise InvalidRoutine(f"cannot be read: {_why(exc)}") from exc
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidRoutine("not UTF-8 text") from None
    return parse_routine_text(name, text)


def _opened_path(fd: int) -> str | None:
    """The real path of the file open as ``fd``, or None where the system does not say."""
    try:
        opened = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return None
    return opened if os.path.isabs(opened) else None


def _read_capped(folder: _Folder, entry: str) -> bytes:
    # O_NONBLOCK: should the entry have become a FIFO since it was checked, opening it must not
    # hang; fstat then confirms we hold a regular file before reading anything.
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(entry, flags, dir_fd=folder.fd)
    with open(fd, "rb", closefd=True) as file:
        # The file opened, not the path checked: the entry may have become a symlink leading
        # outside since (a swap between the check and the open). Where the system names an
        # open file's path (Linux's /proc), the one opened is checked before it is read.
        opened = _opened_path(file.fileno())
        if opened is not None and os.path.commonpath([folder.real, opened]) != folder.real:
            raise folder.outside()
        info = os.fstat(file.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise InvalidRoutine("is not a regular file")
        too_large = InvalidRoutine(
            f"is larger than {MAX_ROUTINE_FILE_BYTES // 1024} KiB, the limit for a routine file"
        )
        if info.st_size > MAX_ROUTINE_FILE_BYTES:
            raise too_large
        data = file.read(MAX_ROUTINE_FILE_BYTES + 1)
    if len(data) > MAX_ROUTINE_FILE_BYTES:
        raise too_large
    return data


def _why(exc: OSError) -> str:
    return exc.strerror or str(exc)
