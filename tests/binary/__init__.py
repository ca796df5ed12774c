"""Binary-protocol tests: a differential table against the real memcached, python-binary-memcached
(with and without SASL), pylibmc in binary mode, and memccapable."""
