"""Exceptions raised by mnemo, by memcached's reply classes.

    MnemoError
     ├─ ClientError            the server replied CLIENT_ERROR ...
     │   ├─ IllegalInputError  a bad key or argument, found before anything was sent (ValueError)
     │   └─ UnknownCommandError  the server replied ERROR
     ├─ ServerError            the server replied SERVER_ERROR ... (or BUSY)
     ├─ UnexpectedReplyError   a garbled reply, or one that does not answer the command
     ├─ NetworkError           connecting, writing or reading failed (ConnectionError)
     │   ├─ TimeoutError       no reply in time (also the built-in TimeoutError)
     │   └─ NoServersError     every server that could own the key is ejected
     ├─ DecodeError            a stored value cannot be turned back into a Python value
     └─ ConfigurationError     bad client settings (ValueError)

The pymemcache names are aliases (MemcacheError, MemcacheClientError, ...), so `except` clauses
written for pymemcache keep working after the import is changed.
"""
import builtins


class MnemoError(Exception):
    """Base class of every error mnemo raises."""


class ClientError(MnemoError):
    """The server refused the request: CLIENT_ERROR."""


class IllegalInputError(ClientError, ValueError):
    """A key or argument that cannot be sent (empty or over 250 bytes, spaces, control
    characters, a type that is not allowed)."""


class UnknownCommandError(ClientError):
    """The server replied ERROR (it does not know the command)."""


class ServerError(MnemoError):
    """The server failed the request: SERVER_ERROR (out of memory, object too large ...)."""


class UnexpectedReplyError(MnemoError):
    """A reply that could not be parsed or does not answer the command sent."""


class NetworkError(MnemoError, ConnectionError):
    """Connecting to, writing to or reading from a server failed. Counts towards ejecting it."""


class TimeoutError(NetworkError, builtins.TimeoutError):
    """The server did not answer within the client's timeout."""


class NoServersError(NetworkError):
    """No live server: every server that could own the key is ejected."""


class DecodeError(MnemoError, ValueError):
    """A stored value's bytes do not match its flags (bad UTF-8, a bad compressed block ...)."""


class ConfigurationError(MnemoError, ValueError):
    """Client settings that cannot work."""


# pymemcache's names.
MemcacheError = MnemoError
MemcacheClientError = ClientError
MemcacheIllegalInputError = IllegalInputError
MemcacheUnknownCommandError = UnknownCommandError
MemcacheServerError = ServerError
MemcacheUnknownError = UnexpectedReplyError
MemcacheUnexpectedCloseError = NetworkError
