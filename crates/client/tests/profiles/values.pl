#!/usr/bin/perl
# Perl's side of tests/profiles.rs (and python/tests/test_profiles.py): Cache::Memcached::Fast
# (utf8 => 1) and Cache::Memcached write every kind of value, plain and compressed, or read
# what mnemo wrote.
#   perl values.pl write HOST:PORT PREFIX
#       prints key TAB client TAB kind TAB compressed(0/1) TAB hex(payload)
#   perl values.pl read HOST:PORT KEYFILE CLIENT   (CLIENT: perl-fast or perl-classic)
#       prints key TAB client TAB kind TAB hex(payload)
# kind: bytes (a byte string), text (a character string: payload its UTF-8), ser:perl-storable
# (payload: Storable::nfreeze of it), miss.
use strict;
use warnings;
use Cache::Memcached;
use Cache::Memcached::Fast;
use Storable qw(nfreeze);

my ($mode, $addr) = @ARGV;

sub hex_of { unpack('H*', $_[0]) }

sub describe {
    my ($v) = @_;
    return ('miss', '') unless defined $v;
    return ('ser:perl-storable', nfreeze($v)) if ref $v;
    if (utf8::is_utf8($v)) {
        my $b = $v;
        utf8::encode($b);
        return ('text', $b);
    }
    return ('bytes', $v);
}

sub words {
    my ($n) = @_;
    my @w = qw(alpha bravo charlie delta echo foxtrot golf hotel);
    my $s = '';
    for (my $i = 0; length($s) < $n; $i++) { $s .= $w[($i * 7 + 1) % 8] . " $i " }
    return $s;
}

sub client {
    my ($name) = @_;
    my %args = (servers => [$addr], compress_threshold => 1000);
    return $name eq 'perl-fast'
        ? Cache::Memcached::Fast->new({%args, utf8 => 1})
        : Cache::Memcached->new({%args});
}

if ($mode eq 'write') {
    my $prefix = $ARGV[2];
    my $long = words(40000);
    my $smile = "\x{263a} smile \x{e9}";
    for my $name ('perl-fast', 'perl-classic') {
        my $c = client($name);
        my $tag = $name eq 'perl-fast' ? 'pf' : 'pc';
        my @cases = (
            ['bytes', "h\xe9llo \x00\xff", 0],
            ['num', 42, 0],
            ['float', 1.5, 0],
            ['arr', [1, 'two', {three => 3}], 0],
            ['long', $long, 1],
            ['longarr', [($long) x 3], 1],
        );
        # Only ::Fast stores character strings (flag 4).
        push @cases, ['text', $smile, 0], ['longtext', $smile . $long, 1] if $name eq 'perl-fast';
        for my $case (@cases) {
            my ($k, $v, $compressed) = @$case;
            my $key = "$prefix$tag:$k";
            $c->set($key, $v) or die "set $key failed";
            my ($kind, $payload) = describe($v);
            print join("\t", $key, $name, $kind, $compressed, hex_of($payload)), "\n";
        }
    }
} else {
    my ($keyfile, $name) = @ARGV[2, 3];
    my $c = client($name);
    open(my $fh, '<', $keyfile) or die "$keyfile: $!";
    while (my $key = <$fh>) {
        chomp $key;
        next unless length $key;
        my ($kind, $payload) = describe($c->get($key));
        print join("\t", $key, $name, $kind, hex_of($payload)), "\n";
    }
}
