"""A Django cache backend on mnemo.Client.

    CACHES = {
        "default": {
            "BACKEND": "mnemo.django.MnemoCache",
            "LOCATION": ["10.0.0.1:11211", "10.0.0.2:11211:2"],   # or "a:11211;b:11211"
            "OPTIONS": {"compression": "zlib", "timeout": 1.0},  # mnemo.Client's keywords
        }
    }

Django's memcached semantics (BaseMemcachedCache): timeout=None never expires, 0 expires at once,
over 30 days becomes a unix time. Values are stored as pymemcache's pickle_serde and pylibmc store
them, so a site can switch from PyMemcacheCache or PyLibMCCache with its cache still warm (with
the same servers and weights as pylibmc, every key is found on the same server).
"""
from django.core.cache.backends.base import DEFAULT_TIMEOUT
from django.core.cache.backends.memcached import BaseMemcachedCache

import mnemo


# PyMemcacheCache OPTIONS that mean nothing here: mnemo always sets TCP_NODELAY, pools
# connections and takes UTF-8 keys.
_PYMEMCACHE_ALWAYS_ON = {"no_delay", "use_pooling", "allow_unicode_keys"}


def _from_pymemcache(options):
    """OPTIONS written for PyMemcacheCache (Django's documented example: no_delay, ignore_exc,
    max_pool_size, use_pooling) as mnemo.Client keywords, so only BACKEND has to change."""
    out = {k: v for k, v in options.items() if k not in _PYMEMCACHE_ALWAYS_ON}
    if "max_pool_size" in out:
        out["max_connections"] = out.pop("max_pool_size")
    return out


class MnemoCache(BaseMemcachedCache):
    """Django's memcached backend with mnemo.Client underneath (one client per process and
    alias, shared by threads)."""

    def __init__(self, server, params):
        super().__init__(server, params, library=mnemo, value_not_found_exception=KeyError)
        self._options = _from_pymemcache(self._options)

    def set(self, key, value, timeout=DEFAULT_TIMEOUT, version=None):
        try:
            super().set(key, value, timeout, version)
        except mnemo.ServerError:
            # Too large for the server: the old value must not stay (Django's cached_db
            # sessions rely on it), then the error is the caller's.
            self._cache.delete(self.make_and_validate_key(key, version=version))
            raise

    def close(self, **kwargs):
        # Connections are pooled and shared by threads: closing them at the end of every
        # request (Django's default for memcached) would only cost reconnects.
        pass
