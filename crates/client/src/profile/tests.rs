//! Whole values through each profile: type, compression framing, and reading several at once.

use super::*;
use crate::serde::FlagSerde;
use crate::values::ValueCodec;

fn codec(readers: &[FlagProfile]) -> ValueCodec {
    ValueCodec {
        serde: Box::new(FlagSerde),
        compression: readers[0].default_compression(),
        readers: readers.to_vec(),
        max_inflated: 1 << 20,
    }
}

fn owned(v: ValueRef<'_>) -> Value {
    match v {
        ValueRef::Bytes(b) | ValueRef::Pickled(b) => Value::Bytes(b.to_vec()),
        ValueRef::Text(s) => Value::Text(s.to_owned()),
        ValueRef::Int(i) => Value::Int(i),
        ValueRef::Float(f) => Value::Float(f),
        ValueRef::Bool(b) => Value::Bool(b),
        ValueRef::Serialized { format, data } => Value::Serialized {
            format,
            data: data.to_vec(),
        },
    }
}

fn words(n: usize) -> String {
    (0..n).map(|i| format!("w{} ", i % 50)).collect()
}

#[test]
fn every_family_round_trips_its_types_plain_and_compressed() {
    let long = words(10_000);
    for p in [
        FlagProfile::PhpMemcached,
        FlagProfile::PhpMemcache,
        FlagProfile::Perl,
        FlagProfile::Java,
    ] {
        let c = codec(&[p]);
        c.check().unwrap();
        let values = [
            ValueRef::Bytes(b"\x00\xffraw"),
            ValueRef::Text("héllo"),
            ValueRef::Int(-42),
            ValueRef::Float(0.1),
            ValueRef::Bool(true),
            ValueRef::Bool(false),
            ValueRef::Text(&long),
        ];
        for v in values {
            let (d, f) = c.encode(v, None).unwrap();
            let back = c.decode(d.into_owned(), f).unwrap();
            // Perl's scalars carry no type: numbers and booleans come back as their text.
            let want = match (p, v) {
                (FlagProfile::Perl, ValueRef::Int(_) | ValueRef::Float(_) | ValueRef::Bool(_)) => {
                    Value::Bytes(match v {
                        ValueRef::Int(i) => i.to_string().into_bytes(),
                        ValueRef::Float(x) => format!("{x:?}").into_bytes(),
                        ValueRef::Bool(b) => {
                            if b {
                                b"1".to_vec()
                            } else {
                                vec![]
                            }
                        }
                        _ => unreachable!(),
                    })
                }
                // PHP strings are bytes: text when UTF-8.
                (FlagProfile::PhpMemcached | FlagProfile::PhpMemcache, ValueRef::Bytes(b)) => {
                    Value::Bytes(b.to_vec())
                }
                _ => owned(v),
            };
            assert_eq!(back, want, "{p:?} {v:?}");
        }
        // The long text is compressed (past every family's threshold), with the family's bits.
        let (d, f) = c.encode(ValueRef::Text(&long), None).unwrap();
        assert_ne!(f & p.compression_bits(), 0, "{p:?}");
        assert!(d.len() < long.len() / 2);
        // The per-call switch.
        let (_, f) = c.encode(ValueRef::Text(&long), Some(false)).unwrap();
        assert_eq!(f & p.compression_bits(), 0, "{p:?}");
    }
}

#[test]
fn php_compressed_values_carry_their_length() {
    let c = codec(&[FlagProfile::PhpMemcached]);
    let long = words(1000);
    let (d, f) = c.encode(ValueRef::Text(&long), None).unwrap();
    assert_eq!(f, 0x30);
    assert_eq!(&d[..4], &(long.len() as u32).to_le_bytes());
    assert_eq!(&d[4..6], b"\x78\x9c");
    // A length prefix that lies, or past the limit, is an error, not a short or huge value.
    let mut lie = d.to_vec();
    lie[0] ^= 1;
    assert!(c.decode(lie, f).is_err());
    let mut huge = d.to_vec();
    huge[..4].copy_from_slice(&u32::MAX.to_le_bytes());
    assert!(c.decode(huge, f).is_err());
    assert!(c.decode(vec![1, 2], f).is_err());
    // What php-memcached 3.2 stored for str_repeat("the quick brown fox ", 200) by FastLZ.
    let mut fastlz = 4000u32.to_le_bytes().to_vec();
    fastlz.extend_from_slice(b"\x13the quick brown fox \xe0\xfd\x13\xe0\xfd\x13\xe0\xfd\x13\xe0\xfd\x13\xe0\xfd\x13\xe0\xfd\x13\xe0\xfd\x13\xe0\xfd\x13\xe0\xfd\x13\xe0\xfd\x13\xe0\xfd\x13\xe0\xfd\x13\xe0\xfd\x13\xe0\xfd\x13\xe0\xfd\x13\xe0&\x13\x02ox ");
    assert_eq!(
        c.decode(fastlz, 0x50).unwrap(),
        Value::Text("the quick brown fox ".repeat(200))
    );
    // zstd (0x90), which builds of the extension with zstd write.
    let mut z = (long.len() as u32).to_le_bytes().to_vec();
    z.extend(compress::zstd_compress(long.as_bytes(), 3).unwrap());
    assert_eq!(c.decode(z, 0x90).unwrap(), Value::Text(long));
}

#[test]
fn combinations_and_collisions() {
    use FlagProfile::*;
    for a in FlagProfile::ALL {
        for b in FlagProfile::ALL {
            let ok = a.combines_with(b);
            assert_eq!(ok, b.combines_with(a));
            assert_eq!(
                check(a, &[b], a.default_compression().algorithm).is_ok(),
                ok,
                "{a:?} {b:?}"
            );
        }
    }
    // Perl + Java: each other's values, gzip of either, serializations told apart.
    let c = codec(&[Perl, Java]);
    assert_eq!(c.decode(vec![1, 0], java::LONG).unwrap(), Value::Int(256));
    assert_eq!(
        c.decode(b"x".to_vec(), perl::UTF8).unwrap(),
        Value::Text("x".into())
    );
    let java_obj = b"\xac\xed\x00\x05t\x00\x01x".to_vec();
    assert_eq!(
        c.decode(java_obj.clone(), 1).unwrap(),
        Value::Serialized {
            format: Serialization::Java,
            data: java_obj
        }
    );
    // gzip under flag 2 with Java's type bits: Java's reading.
    let gz = compress::gzip_compress(&[1, 0], 6);
    assert_eq!(
        c.decode(gz, java::LONG | java::COMPRESSED).unwrap(),
        Value::Int(256)
    );
    // A profile's clients must read the algorithm.
    assert!(check(Perl, &[], Algorithm::zlib()).is_err());
    assert!(check(Python, &[], Algorithm::zstd()).is_err());
    assert!(check(Java, &[], Algorithm::gzip()).is_ok());
    assert_eq!(
        FlagProfile::from_name("php-memcached").unwrap(),
        PhpMemcached
    );
    for p in FlagProfile::ALL {
        assert_eq!(FlagProfile::from_name(p.name()).unwrap(), p);
    }
    assert!(FlagProfile::from_name("ruby").is_err());
}

#[test]
fn serialized_objects_go_back_with_their_flags() {
    use FlagProfile::*;
    for (p, format, flags) in [
        (PhpMemcached, Serialization::Php, 4),
        (PhpMemcached, Serialization::Json, 6),
        (PhpMemcache, Serialization::Php, 1),
        (Perl, Serialization::PerlStorable, 1),
        (Java, Serialization::Java, 1),
    ] {
        let c = codec(&[p]);
        // Perl's and Java's flag 1 are told apart by Java's 0xACED magic.
        let data: &[u8] = if format == Serialization::Java {
            b"\xac\xed\x00\x05x"
        } else {
            b"\x05\x0bx"
        };
        let v = ValueRef::Serialized { format, data };
        let (d, f) = c.encode(v, None).unwrap();
        assert_eq!(f, flags, "{p:?} {format:?}");
        assert_eq!(c.decode(d.into_owned(), f).unwrap(), owned(v));
    }
    // A serialization the family's clients do not read is refused, as under mnemo's profile.
    let perl_in_php = ValueRef::Serialized {
        format: Serialization::PerlStorable,
        data: b"x",
    };
    for p in [Mnemo, Python, PhpMemcached, PhpMemcache, Java] {
        assert!(codec(&[p]).encode(perl_in_php, None).is_err(), "{p:?}");
    }
}

#[test]
fn gzip_is_bounded() {
    let gz = compress::gzip_compress(&vec![0u8; 1 << 20], 6);
    assert!(compress::gzip_decompress(&gz, (1 << 20) - 1).is_err());
    assert_eq!(
        compress::gzip_decompress(&gz, 1 << 20).unwrap().len(),
        1 << 20
    );
    assert!(compress::gzip_decompress(&gz[..gz.len() / 2], 1 << 20).is_err());
    assert!(compress::gzip_decompress(b"not gzip", 100).is_err());
}
