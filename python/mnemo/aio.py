"""The asyncio client: mnemo.Client's methods as coroutines-to-await.

    import mnemo.aio
    client = mnemo.aio.Client(["127.0.0.1:11211"])
    await client.set("k", "v")
    await client.get_many(["k", "x"])   # {'k': 'v'}

Each call returns an asyncio future of the running loop. The I/O runs on one background thread
shared by every mnemo.aio.Client (mnemo's Rust client on its runtime); the result is handed back
to the loop, so nothing blocks it. Routing, flags, compression and errors are exactly those of
mnemo.Client.
"""
from . import _mnemo

__all__ = ["Client"]


class Client(_mnemo.Client):
    """mnemo.Client's constructor and methods; every method except close() and route() returns
    an awaitable. Create it anywhere; call its methods from a running event loop."""

    def __new__(cls, servers, **kwargs):
        kwargs["asyncio"] = True
        return super().__new__(cls, servers, **kwargs)

    def __init__(self, servers, **kwargs):
        pass

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        self.close()

    def __repr__(self):
        return f"mnemo.aio.Client({self.servers!r})"

    get_multi = _mnemo.Client.get_many
    set_multi = _mnemo.Client.set_many
    delete_multi = _mnemo.Client.delete_many
    gets_multi = _mnemo.Client.gets_many
