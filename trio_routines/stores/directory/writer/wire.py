"""The writer process's wire (see process.py): one message is an 8-byte big-endian length and
that many bytes. Both ends import this; the parent's reading of a reply is replies.py's (the
child imports no event loop).
"""

from __future__ import annotations

import struct
import sys

LENGTH = struct.Struct("!Q")
READY = b"R"  # what the child sends once it is up


#: Where the child reads the parent's file system encoding, which it must share: a routine's
#: name is a file name, and the two must make the same one of it.
ENCODING_VARIABLE = "TRIO_ROUTINES_WRITER_ENCODING"


def file_names() -> str:
    """How this process makes file names of text: its encoding and its error handler."""
    return f"{sys.getfilesystemencoding()}/{sys.getfilesystemencodeerrors()}"
