"""Flag profiles from Python: what the real PHP (php-memcached, php-memcache), Perl
(Cache::Memcached::Fast, Cache::Memcached) and Java (xmemcached, where a JDK and its jar are
here) clients store, mnemo.Client(profile=...) reads as the same Python type, and the other way
round, plain and compressed, on mnemod and on memcached. The other languages' sides are
crates/client/tests/profiles/values.php, values.pl and Values.java, shared with the Rust
client's test (crates/client/tests/profiles.rs)."""
import math
import os
import pathlib
import shutil
import subprocess
import tempfile

import pytest

import mnemo
from conftest import raw_get

SCRIPTS = pathlib.Path(__file__).resolve().parents[2] / "crates" / "client" / "tests" / "profiles"
COMPRESSION_BITS = {"php": 0x10, "php-memcache": 2, "perl": 2, "java": 2}
FAMILY = {"php-memcached": "php", "php-memcache": "php-memcache",
          "perl-fast": "perl", "perl-classic": "perl", "java": "java"}


def have(cmd, *args):
    if shutil.which(cmd) is None:
        return False
    return subprocess.run([cmd, *args], capture_output=True).returncode == 0


HAVE_PHP = have("php", "-r", "exit(class_exists('Memcached') && class_exists('Memcache') ? 0 : 1);")
HAVE_PERL = have("perl", "-MCache::Memcached", "-MCache::Memcached::Fast", "-e1")


def java_classpath():
    """xmemcached and slf4j-api: $MNEMO_JAVA_CP, else from ~/.m2 (scripts/test.sh fetches them
    where Maven is here), as the Rust test finds them; None without a JDK or the jars."""
    if os.environ.get("MNEMO_JAVA_CP"):
        return os.environ["MNEMO_JAVA_CP"]
    m2 = pathlib.Path.home() / ".m2" / "repository"
    xm = m2 / "com/googlecode/xmemcached/xmemcached/2.4.8/xmemcached-2.4.8.jar"
    slf4j = sorted(m2.glob("org/slf4j/slf4j-api/*/slf4j-api-*.jar"))
    if shutil.which("java") and xm.exists() and slf4j:
        return f"{xm}:{slf4j[-1]}"
    return None


JAVA_CP = java_classpath()
# How each language's side is run here: the command line before its arguments.
SIDE_OF = {}
if HAVE_PHP:
    SIDE_OF["php"] = ["php", str(SCRIPTS / "values.php")]
if HAVE_PERL:
    SIDE_OF["perl"] = ["perl", str(SCRIPTS / "values.pl")]
if JAVA_CP:
    SIDE_OF["java"] = ["java", "-cp", JAVA_CP, str(SCRIPTS / "Values.java")]
SIDES = list(SIDE_OF.values())


def run(side, *args):
    p = subprocess.run([*side, *args], capture_output=True, check=False)
    assert p.returncode == 0, (side, args, p.stdout, p.stderr)
    return [line.split("\t") for line in p.stdout.decode().splitlines()]


def expected(kind, payload):
    if kind == "bytes":
        return payload
    if kind == "text":
        return payload.decode()
    if kind == "int":
        return int(payload)
    if kind == "float":
        return float(payload)
    if kind == "bool":
        return payload == b"1"
    assert kind.startswith("ser:"), kind
    return mnemo.Serialized(payload, kind[4:])


@pytest.mark.skipif(not SIDES, reason="no PHP, Perl or Java memcached client is installed")
def test_php_perl_and_java_write_mnemo_reads(server):
    clients = {}
    n = 0
    for side in SIDES:
        for key, who, kind, compressed, payload in run(side, "write", server.addr, "py:"):
            profile = FAMILY[who]
            c = clients.setdefault(profile, mnemo.Client(server.addr, profile=profile))
            want = expected(kind, bytes.fromhex(payload))
            got = c.get(key)
            assert type(got) is type(want) and got == want, (who, key, got, want)
            if isinstance(want, mnemo.Serialized):
                assert got.format == want.format, (who, key)
            flags, _ = raw_get(server.port, key)
            assert bool(flags & COMPRESSION_BITS[profile]) == (compressed == "1"), (who, key, flags)
            # get_many takes the same path as get for many keys.
            assert c.get_many([key]) == {key: want}
            n += 1
    assert n == 31 * HAVE_PHP + 14 * HAVE_PERL + 16 * bool(JAVA_CP)


LONG = "".join(f"wörd{i % 97} " for i in range(6000))
VALUES = {
    "bytes": b"\x00\x01bin\xff",
    "text": "héllo wörld",
    "int": -42,
    "bigint": 1234567890123,
    "float": 0.1,
    "huge": -1e100,
    "true": True,
    "false": False,
    "long": LONG,
    "longbytes": LONG.encode() + b"\x00\xff",
}


# An object as PHP's serialize([1, 2]) and Perl's nfreeze([1, 2]) make it: stored back as read.
SERIALIZED = {
    "php": mnemo.Serialized(b"a:2:{i:0;i:1;i:1;i:2;}", "php"),
    "php-memcache": mnemo.Serialized(b"a:2:{i:0;i:1;i:1;i:2;}", "php"),
    "perl": mnemo.Serialized(bytes.fromhex("050b020000000208810882"),
                             "perl-storable"),
    # java.util.ArrayList of "a", "b", as xmemcached stored it.
    "java": mnemo.Serialized(bytes.fromhex(
        "aced0005737200136a6176612e7574696c2e41727261794c6973747881d21d99c7619d03000149"
        "000473697a65787000000002770400000002740001617400016278"), "java"),
}


def read_back(who, v, ty, p):
    """Whether the family's client read v as the same type (PHP: gettype; Perl: bytes/text)."""
    if who == "java":
        if isinstance(v, mnemo.Serialized):
            return ty == "ArrayList" and p == b"[a, b]"
        if isinstance(v, bool):
            return ty == "Boolean" and p == (b"1" if v else b"0")
        if isinstance(v, int):
            return ty == "Long" and p == str(v).encode()
        if isinstance(v, float):
            return ty == "Double" and float(p) == v
        if isinstance(v, str):
            return ty == "String" and p == v.encode()
        return ty == "byte[]" and p == v
    if isinstance(v, mnemo.Serialized):
        # The scripts print an array or reference as serialize() / nfreeze() of it.
        return ty == ("array" if who.startswith("php") else "ser:perl-storable") and p == v
    if who.startswith("php"):
        if isinstance(v, bool):
            return ty == "boolean" and p == (b"1" if v else b"0")
        if isinstance(v, int):
            return ty == "integer" and p == str(v).encode()
        if isinstance(v, float):
            return ty == "double" and float(p) == v
        return ty == "string" and p == (v.encode() if isinstance(v, str) else v)
    # Perl: numbers and booleans are their text; ::Fast (utf8 => 1) marks character strings.
    if isinstance(v, bool):
        return ty == "bytes" and p == (b"1" if v else b"")
    if isinstance(v, (int, float)):
        return ty == "bytes" and float(p) == v
    if isinstance(v, str):
        return ty == ("text" if who == "perl-fast" else "bytes") and p == v.encode()
    return ty == "bytes" and p == v


FAMILIES = ([("php", "php", ["php-memcached"]),
             ("php-memcache", "php", ["php-memcache"])] * HAVE_PHP
            + [("perl", "perl", ["perl-fast", "perl-classic"])] * HAVE_PERL
            + [("java", "java", ["java"])] * bool(JAVA_CP))


@pytest.mark.skipif(not FAMILIES, reason="no PHP, Perl or Java memcached client is installed")
def test_mnemo_writes_php_perl_and_java_read(server):
    for profile, side, readers in FAMILIES:
        c = mnemo.Client(server.addr, profile=profile)
        values = dict(VALUES, serialized=SERIALIZED[profile])
        compressed = 0
        for k, v in values.items():
            key = f"pyr:{profile}:{k}"
            assert c.set(key, v)
            assert type(c.get(key)) is type(v) or profile == "perl"
            if isinstance(v, mnemo.Serialized):
                assert c.get(key).format == v.format
            flags, _ = raw_get(server.port, key)
            compressed += bool(flags & COMPRESSION_BITS[profile])
        assert compressed == 2, profile
        with tempfile.NamedTemporaryFile("w", suffix=".keys") as f:
            f.write("\n".join(f"pyr:{profile}:{k}" for k in values))
            f.flush()
            for who in readers:
                rows = run(SIDE_OF[side], "read", server.addr, f.name, who)
                assert len(rows) == len(values)
                for key, _, ty, p in rows:
                    v = values[key.rsplit(":", 1)[1]]
                    assert read_back(who, v, ty, bytes.fromhex(p)), (who, key, ty, p, v)


def test_profile_rules(mnemod):
    php = mnemo.Client(mnemod.addr, profile="php")
    # PHP's clients cannot read a pickle: refused, not stored as something they misread.
    with pytest.raises(mnemo.IllegalInputError):
        php.set("p:dict", {"a": 1})
    with pytest.raises(mnemo.IllegalInputError):
        php.set("p:nan", math.nan)
    with pytest.raises(mnemo.IllegalInputError):
        php.set("p:storable", mnemo.Serialized(b"\x05\x0b", "perl-storable"))
    # Floats and bools are their own types here (the mnemo profile pickles them).
    php.set("p:f", 2.5)
    php.set("p:b", True)
    assert raw_get(mnemod.port, "p:f") == (2, b"2.5")
    assert raw_get(mnemod.port, "p:b") == (3, b"1")
    assert php.get_many(["p:f", "p:b"]) == {"p:f": 2.5, "p:b": True}
    # Seed 000's rules under the profile: threshold 2000, the per-call switch, already
    # compressed data left alone.
    php.set("p:short", "x" * 1999)
    php.set("p:plain", "x" * 5000, compress=False)
    php.set("p:png", b"\x89PNG" + b"x" * 5000)
    php.set("p:long", "x" * 5000)
    assert raw_get(mnemod.port, "p:short")[0] == 0
    assert raw_get(mnemod.port, "p:plain")[0] == 0
    assert raw_get(mnemod.port, "p:png")[0] == 0
    assert raw_get(mnemod.port, "p:long")[0] == 0x30
    assert php.get("p:long") == "x" * 5000
    # Perl and Java combine; PHP collides with Python's flags.
    mnemo.Client(mnemod.addr, profile="perl").set("p:gz", "y" * 5000)
    mnemo.Client(mnemod.addr, profile="java").set("p:long7", 7)
    both = mnemo.Client(mnemod.addr, profile="perl", also_read=["java"])
    assert both.get_many(["p:gz", "p:long7"]) == {"p:gz": "y" * 5000, "p:long7": 7}
    with pytest.raises(mnemo.ConfigurationError):
        mnemo.Client(mnemod.addr, profile="php", also_read=["python"]).get("x")
    with pytest.raises(mnemo.ConfigurationError):
        mnemo.Client(mnemod.addr, profile="ruby")
    with pytest.raises(mnemo.ConfigurationError):
        mnemo.Client(mnemod.addr, profile="perl", compression="zstd").get("x")
