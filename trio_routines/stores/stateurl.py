"""The one parameter of a PostgreSQL state URL that is ours, not libpq's: ``schema``.

``postgresql://host/db?schema=mine`` keeps the tables in schema ``mine`` (created if missing),
as ``PostgresStore(url, schema="mine")`` does: where the command line and the service's
environment give a store by its URL alone, the schema is chosen there too. The parameter is
taken out of the URL before libpq reads it (libpq refuses a parameter it does not know); the
others are passed on byte for byte, never decoded and encoded again (``+`` is no space to
libpq, as it is to a form's decoder).
"""

from __future__ import annotations

from urllib.parse import unquote

#: PostgreSQL's longest name, in bytes: a longer one is cut, so two long names could meet.
NAME_BYTES = 63


def split_schema(url: str) -> tuple[str, str | None]:
    """``url`` without its ``schema=`` parameter, and the schema it names (None: none).

    ValueError, in words, when the parameter names no schema, names one PostgreSQL would cut,
    is not UTF-8 once decoded, or is given more than once."""
    base, mark, query = url.partition("?")
    if not mark:
        return url, None
    kept, found = [], []
    for pair in query.split("&"):
        key, _, value = pair.partition("=")
        if unquote(key) != "schema":
            kept.append(pair)
            continue
        try:
            found.append(unquote(value, errors="strict"))
        except UnicodeDecodeError:
            raise ValueError(
                "the state URL's schema= is not UTF-8 once its percent-escapes are decoded"
            ) from None
    if not found:
        return url, None
    if len(found) > 1:
        raise ValueError("the state URL gives schema= more than once: give it once")
    (schema,) = found
    if not schema.strip():
        raise ValueError("the state URL's schema= names no schema: name one, or leave it out")
    if any(ord(char) < 32 or ord(char) == 127 for char in schema):
        # A NUL ends the name where the server reads it: two schemas given would be one.
        raise ValueError("the state URL's schema= holds a control character (%00, say)")
    if len(schema.encode("utf-8")) > NAME_BYTES:
        raise ValueError(
            f"the state URL's schema= is longer than PostgreSQL's {NAME_BYTES} bytes a name"
        )
    rest = "&".join(kept)
    return base + ("?" + rest if rest else ""), schema
