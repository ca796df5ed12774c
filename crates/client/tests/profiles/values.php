<?php
// PHP's side of tests/profiles.rs (and python/tests/test_profiles.py): php-memcached and
// php-memcache write every type, plain and compressed, or read what mnemo wrote.
//   php values.php write HOST:PORT PREFIX
//       stores each case; prints key TAB client TAB kind TAB compressed(0/1) TAB hex(payload)
//   php values.php read HOST:PORT KEYFILE CLIENT
//       reads each key (one per line) with CLIENT (php-memcached or php-memcache); prints
//       key TAB client TAB gettype TAB hex(payload)
// kind: bytes, text, int, float, bool, ser:FORMAT; payload: the string, the number's decimal
// text (floats: 17 significant digits), "1"/"0", or the serialized bytes.
[$_, $mode, $addr] = $argv;
[$host, $port] = explode(':', $addr);

function out($key, $client, $kind, $extra, $payload) {
    echo "$key\t$client\t$kind\t" . ($extra === null ? '' : "$extra\t") . bin2hex($payload) . "\n";
}
function payload($v) {
    if (is_bool($v)) return $v ? '1' : '0';
    if (is_float($v)) return sprintf('%.17g', $v);
    return (string)$v;
}
// Text made of words: compresses well; 40 KB passes every family's threshold.
function words($n, $seed) {
    $w = ['alpha', 'brävo', 'charlie', 'delta', 'écho', 'foxtrot', 'golf', 'hotel'];
    $s = '';
    for ($i = 0; strlen($s) < $n; $i++) $s .= $w[($i * 7 + $seed) % 8] . ' ' . $i . ' ';
    return $s;
}
// 100 KB of one 10 KB block of pseudo-random words, repeated: FastLZ's level 2 (past 64 KB)
// with matches past its short distance (8 KB).
function big() {
    $x = 12345; $b = '';
    while (strlen($b) < 10000) { $x = ($x * 1103515245 + 12345) % 2147483648; $b .= 'w' . ($x % 997) . ' '; }
    return str_repeat($b, 10);
}

if ($mode === 'write') {
    $prefix = $argv[3];
    $m = new Memcached();
    $m->addServer($host, (int)$port);
    $long = words(40000, 1);
    $bin = "\x00\x01binary\xff\xfe";
    $cases = [
        ['str', 'héllo wörld', 'text', 0], ['bin', $bin, 'bytes', 0],
        ['int', 42, 'int', 0], ['neg', -7, 'int', 0], ['max', PHP_INT_MAX, 'int', 0],
        ['dbl', 1.5, 'float', 0], ['tenth', 0.1, 'float', 0], ['huge', 1e100, 'float', 0],
        ['true', true, 'bool', 0], ['false', false, 'bool', 0],
        ['arr', [1, 'two' => 2.5], 'ser:php', 0],
        ['long', $long, 'text', 1], ['big', big(), 'text', 1],
        ['longbin', $bin . str_repeat('xyz', 5000), 'bytes', 1],
        ['longarr', array_fill(0, 500, 'abc'), 'ser:php', 1],
    ];
    foreach ($cases as [$k, $v, $kind, $c]) {
        $key = "{$prefix}pm:$k";
        if (!$m->set($key, $v)) { fwrite(STDERR, "set $key failed\n"); exit(1); }
        out($key, 'php-memcached', $kind, $c, $kind === 'ser:php' ? serialize($v) : payload($v));
    }
    // The other compression type and the other serializers.
    $m->setOption(Memcached::OPT_COMPRESSION_TYPE, Memcached::COMPRESSION_ZLIB);
    $m->set("{$prefix}pm:zlong", $long);
    out("{$prefix}pm:zlong", 'php-memcached', 'text', 1, $long);
    $arr = [1, 2, 'x' => 'y'];
    foreach ([[Memcached::SERIALIZER_IGBINARY, 'igbinary', 'igbinary_serialize'],
              [Memcached::SERIALIZER_JSON, 'json', 'json_encode'],
              [Memcached::SERIALIZER_MSGPACK, 'msgpack', 'msgpack_pack']] as [$ser, $name, $fn]) {
        $m->setOption(Memcached::OPT_SERIALIZER, $ser);
        $m->set("{$prefix}pm:$name", $arr);
        out("{$prefix}pm:$name", 'php-memcached', "ser:$name", 0, $fn($arr));
    }

    $o = new Memcache();
    $o->addServer($host, (int)$port);
    $cases = [
        ['str', 'héllo wörld', 'text', 0, 0], ['bin', $bin, 'bytes', 0, 0],
        ['int', 42, 'int', 0, 0], ['neg', -7, 'int', 0, 0], ['dbl', 1.5, 'float', 0, 0],
        ['tenth', 0.1, 'float', 0, 0], ['true', true, 'bool', 0, 0], ['false', false, 'bool', 0, 0],
        ['arr', [1, 'two' => 2.5], 'ser:php', 0, 0],
        ['long', $long, 'text', 1, MEMCACHE_COMPRESSED],
        ['longbin', $bin . str_repeat('xyz', 5000), 'bytes', 1, MEMCACHE_COMPRESSED],
        ['longarr', array_fill(0, 500, 'abc'), 'ser:php', 1, MEMCACHE_COMPRESSED],
    ];
    foreach ($cases as [$k, $v, $kind, $c, $flag]) {
        $key = "{$prefix}po:$k";
        if (!$o->set($key, $v, $flag)) { fwrite(STDERR, "set $key failed\n"); exit(1); }
        out($key, 'php-memcache', $kind, $c, $kind === 'ser:php' ? serialize($v) : payload($v));
    }
} else {
    [$_, $_, $_, $keyfile, $client] = $argv;
    if ($client === 'php-memcached') {
        $c = new Memcached();
        $c->addServer($host, (int)$port);
    } else {
        $c = new Memcache();
        $c->addServer($host, (int)$port);
    }
    foreach (file($keyfile, FILE_IGNORE_NEW_LINES | FILE_SKIP_EMPTY_LINES) as $key) {
        $v = $c->get($key);
        if ($client === 'php-memcached' && $c->getResultCode() !== Memcached::RES_SUCCESS) {
            out($key, $client, 'miss:' . $c->getResultMessage(), null, '');
            continue;
        }
        out($key, $client, gettype($v), null, is_array($v) ? serialize($v) : payload($v));
    }
}
