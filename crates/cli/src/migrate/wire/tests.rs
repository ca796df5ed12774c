use super::*;

#[test]
fn reads_metadump_lines_of_memcached_and_mnemod() {
    let mut k = Vec::new();
    let l = b"key=a%20b%25c exp=1795785306 la=1795785206 cas=1 fetch=yes cls=1 size=67";
    assert_eq!(
        parse_dump_line(l, &mut k),
        Ok(DumpLine::Item {
            exp: Some(1795785306),
            cas: Some(1)
        })
    );
    assert_eq!(k, b"a b%c");
    assert_eq!(
        parse_dump_line(b"key=x exp=-1 la=1 cas=2 fetch=no cls=1 size=6", &mut k),
        Ok(DumpLine::Item {
            exp: Some(-1),
            cas: Some(2)
        })
    );
    assert_eq!(k, b"x");
    assert_eq!(parse_dump_line(b"END\r", &mut k), Ok(DumpLine::End));
    assert_eq!(
        parse_dump_line(b"BUSY currently processing crawler request", &mut k),
        Ok(DumpLine::Refused(
            "BUSY currently processing crawler request".into()
        ))
    );
    assert!(parse_dump_line(b"key=%zz exp=-1", &mut k).is_err());
    assert!(parse_dump_line(b"key= exp=-1", &mut k).is_err());
    let unknown = DumpLine::Item {
        exp: None,
        cas: None,
    };
    assert_eq!(parse_dump_line(b"key=bare", &mut k), Ok(unknown));
    assert_eq!(k, b"bare");
    assert_eq!(
        parse_dump_line(b"key=z exp=-1 la=1 cas=0 fetch=no", &mut k),
        Ok(DumpLine::Item {
            exp: Some(-1),
            cas: None
        })
    );
    // Any order; a CAS past i64's range; unknown fields between.
    assert_eq!(
        parse_dump_line(
            b"key=w fetch=no la=5 exp=-1 cls=3 cas=9999999999999999999",
            &mut k
        ),
        Ok(DumpLine::Item {
            exp: Some(-1),
            cas: Some(9_999_999_999_999_999_999)
        })
    );
    // A number only where the whole field is one; 20 digits are too many.
    assert_eq!(
        parse_dump_line(b"key=v exp=12x cas=99999999999999999999 la=1", &mut k),
        Ok(DumpLine::Item {
            exp: None,
            cas: None
        })
    );
    assert_eq!(
        parse_dump_line(b"key=v exp=- la=x cas=7", &mut k),
        Ok(DumpLine::Item {
            exp: None,
            cas: Some(7)
        })
    );
    assert_eq!(k, b"v");
    // Escapes: upper and lower case hex, at either end, one after another.
    parse_dump_line(b"key=%3a%3Ak%20%25 exp=-1", &mut k).unwrap();
    assert_eq!(k, b"::k %");
    assert!(parse_dump_line(b"key=ab%4 exp=-1", &mut k).is_err());
    assert!(parse_dump_line(b"key=ab%4g exp=-1", &mut k).is_err());
    // Fields that do not read as numbers are as good as missing: the item's TTL is fetched.
    let odd = parse_dump_line(b"key=y exp=soon cas=-3 la=1", &mut k);
    assert_eq!(
        odd,
        Ok(DumpLine::Item {
            exp: None,
            cas: None
        })
    );
}

/// A metadump line's key, expiry and CAS.
type DumpFields = (Vec<u8>, Option<i64>, Option<u64>);

/// The metadump line as the simplest reading of it says: split at every space, each
/// field's value whole or not at all.
fn reference_dump_line(line: &[u8]) -> Result<DumpFields, ()> {
    let mut fields = line.split(|&b| b == b' ');
    let enc = fields.next().unwrap().strip_prefix(b"key=").unwrap();
    let mut key = Vec::new();
    let mut i = 0;
    while i < enc.len() {
        if enc[i] == b'%' {
            let h = enc.get(i + 1..i + 3).ok_or(())?;
            let h = std::str::from_utf8(h).map_err(|_| ())?;
            // from_str_radix takes a sign; a %XX escape does not.
            if !h.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(());
            }
            key.push(u8::from_str_radix(h, 16).map_err(|_| ())?);
            i += 3;
        } else {
            key.push(enc[i]);
            i += 1;
        }
    }
    if enc.is_empty() {
        return Err(());
    }
    let num = |v: &[u8]| {
        let ok = !v.is_empty() && v.len() <= 19 && v.iter().all(u8::is_ascii_digit);
        ok.then(|| std::str::from_utf8(v).unwrap().parse::<u64>().unwrap())
    };
    let (mut exp, mut cas) = (None, None);
    for f in fields {
        if let Some(v) = f.strip_prefix(b"exp=") {
            exp = match v.strip_prefix(b"-") {
                Some(m) => num(m).and_then(|n| i64::try_from(n).ok()).map(|n| -n),
                None => num(v).and_then(|n| i64::try_from(n).ok()),
            };
        } else if let Some(v) = f.strip_prefix(b"cas=") {
            cas = num(v).filter(|&c| c != 0);
            break;
        }
    }
    Ok((key, exp, cas))
}

#[test]
fn metadump_lines_read_as_the_simplest_reading_says() {
    // Lines put together from pieces that real and broken lines are made of.
    const PIECES: &[&[u8]] = &[
        b"key",
        b":",
        b"%3A",
        b"%3a",
        b"%2",
        b"%zz",
        b"%",
        b"%-1",
        b"%+1",
        b" ",
        b" exp=",
        b" cas=",
        b" la=",
        b"-",
        b"0",
        b"7",
        b"1234567890",
        b"99999999999999999999",
        b"x",
        b" fetch=no",
        b" cls=1",
        b"=",
    ];
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let mut key = Vec::new();
    for _ in 0..200_000 {
        let mut line = b"key=".to_vec();
        for _ in 0..next() % 12 {
            line.extend_from_slice(PIECES[(next() % PIECES.len() as u64) as usize]);
        }
        let got = parse_dump_line(&line, &mut key);
        let want = reference_dump_line(&line);
        match (&got, want) {
            (Ok(DumpLine::Item { exp, cas }), Ok((k, e, c))) => {
                assert_eq!(
                    (&key, *exp, *cas),
                    (&k, e, c),
                    "{:?}",
                    String::from_utf8_lossy(&line)
                )
            }
            (Err(_), Err(())) => {}
            (got, want) => panic!(
                "{:?}: {got:?} against {want:?}",
                String::from_utf8_lossy(&line)
            ),
        }
    }
}

#[test]
fn gets_lines_and_their_answers() {
    let mut req = GETS.to_vec();
    let a = push_gets_key(&mut req, b"user:1");
    let b = push_gets_key(&mut req, b"k");
    assert_eq!(req, b"gets user:1 k");
    assert_eq!((a.token(&req), b.token(&req)), (&b"user:1"[..], &b"k"[..]));
    let r = b"VALUE user:1 7 3 42\r\nabc\r\nEND\r\n";
    let (v, n) = parse_value_reply(r).unwrap().unwrap();
    assert_eq!(
        v,
        ValueReply::Value {
            key: 6..12,
            flags: 7,
            cas: 42,
            data: 21..24
        }
    );
    assert_eq!(&r[6..12], b"user:1");
    assert_eq!(
        parse_value_reply(&r[n..]).unwrap(),
        Some((ValueReply::End, 5))
    );
    for cut in 0..n {
        assert_eq!(parse_value_reply(&r[..cut]).unwrap(), None, "cut at {cut}");
    }
    for bad in [
        &b"VALUE k 1 3\r\n"[..],
        b"VALUE k 1 3 4 5\r\n",
        b"VALUE  1 3 4\r\n",
        b"VALUE k -1 3 4\r\n",
        b"VALUE k 1 x 4\r\n",
        b"SERVER_ERROR out of memory\r\n",
        b"VALUE k 1 1 4\r\nab\r\n",
    ] {
        assert!(parse_value_reply(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn listed_ttls_count_from_now() {
    assert_eq!(listed_ttl(-1, 1000), -1);
    assert_eq!(listed_ttl(1100, 1000), 100);
    // Due now or a second ago by our clock, yet served: 0 left, stored for 1 s.
    assert_eq!(listed_ttl(999, 1000), 0);
    assert_eq!(dest_ttl(listed_ttl(999, 1000), 1000), 1);
}

#[test]
fn gets_name_odd_keys_in_base64() {
    let mut req = Vec::new();
    let a = push_get(&mut req, b"user:1");
    let b = push_get(&mut req, b"a b");
    assert_eq!(req, b"mg user:1 v f t u\r\nmg YSBi b v f t u\r\n");
    assert_eq!(a.token(&req), b"user:1");
    assert_eq!((b.token(&req), b.form), (&b"YSBi"[..], KeyForm::Base64));
    let long = vec![b'k'; MAX_KEY];
    assert_eq!(push_get(&mut Vec::new(), &long).form, KeyForm::Plain);
}

/// memcached 1.6.18 refuses a `b` key whose base64 form passes 250 bytes (it checks the key
/// as sent): binary keys of 187 bytes and more go over the binary protocol only.
#[test]
fn one_place_decides_how_a_key_travels() {
    assert_eq!(key_form(b"user:1"), KeyForm::Plain);
    assert_eq!(key_form(&[b'k'; MAX_KEY]), KeyForm::Plain);
    assert_eq!(key_form(b"a b"), KeyForm::Base64);
    assert_eq!(key_form(&[0u8; 186]), KeyForm::Base64);
    assert_eq!(key_form(&[0u8; 187]), KeyForm::BinaryOnly);
    assert_eq!(key_form(&[0u8; MAX_KEY]), KeyForm::BinaryOnly);
    let mut req = Vec::new();
    push_exists(&mut req, b"k1");
    push_exists(&mut req, b"a b");
    assert_eq!(req, b"mg k1 u\r\nmg YSBi b u\r\n");
    let r = b"HD\r\nEN\r\n";
    assert_eq!(parse_exists(r).unwrap(), Some((true, 4)));
    assert_eq!(parse_exists(&r[4..]).unwrap(), Some((false, 4)));
    assert_eq!(parse_exists(b"HD\r").unwrap(), None);
    assert!(parse_exists(b"SERVER_ERROR x\r\n").is_err());
}

#[test]
fn binary_gets_any_key() {
    let key = [7u8; MAX_KEY];
    let mut req = Vec::new();
    push_bin_get(&mut req, &key);
    assert_eq!(req.len(), 24 + MAX_KEY);
    assert_eq!(
        (req[0], req[1], &req[2..4], &req[8..12]),
        (0x80, 0, &[0, 250][..], &[0, 0, 0, 250][..])
    );
    // A hit: flags 9 in the extras, CAS 5, value "hey"; then a miss.
    let mut r = vec![
        0x81, 0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5,
    ];
    r.extend_from_slice(&[0, 0, 0, 9]);
    r.extend_from_slice(b"hey");
    let miss = [
        0x81, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    ];
    r.extend_from_slice(&miss);
    r.extend_from_slice(b"Not found");
    let (hit, n) = parse_bin_get(&r).unwrap().unwrap();
    assert_eq!(
        hit,
        BinGet::Hit {
            flags: 9,
            cas: 5,
            data: 28..31
        }
    );
    assert_eq!(parse_bin_get(&r[n..]).unwrap(), Some((BinGet::Miss, 33)));
    for cut in 0..n {
        assert_eq!(parse_bin_get(&r[..cut]).unwrap(), None, "cut at {cut}");
    }
    assert!(parse_bin_get(b"VALUE key 0 1 1\r\nx\r\nEND\r\n").is_err());
}

#[test]
fn get_replies_whole_or_not_yet() {
    let r = b"VA 3 f5 t100\r\nabc\r\nEN\r\n";
    let (hit, n) = parse_get_reply(r).unwrap().unwrap();
    assert_eq!(
        hit,
        GetReply::Hit {
            flags: 5,
            ttl: 100,
            data: 14..17
        }
    );
    assert_eq!(parse_get_reply(&r[n..]).unwrap(), Some((GetReply::Miss, 4)));
    for cut in 0..19 {
        assert_eq!(parse_get_reply(&r[..cut]).unwrap(), None, "cut at {cut}");
    }
    assert_eq!(
        parse_get_reply(b"VA 0 t-1 f0\r\n\r\n").unwrap().unwrap().0,
        GetReply::Hit {
            flags: 0,
            ttl: -1,
            data: 13..13
        }
    );
    assert!(parse_get_reply(b"SERVER_ERROR out of memory\r\n").is_err());
    for bad in [
        &b"VA x f1\r\n"[..],
        b"VA 1 f-1\r\n",
        b"VA 1 f4294967296\r\n",
        b"VA 1 t--1\r\n",
        b"VA 1 t\r\n",
        b"VA 99999999999999999999 f1\r\n",
    ] {
        assert!(parse_get_reply(bad).is_err(), "{bad:?}");
    }
    assert_eq!(
        parse_get_reply(b"VA 0 f4294967295 t9223372036854775807\r\n\r\n")
            .unwrap()
            .unwrap()
            .0,
        GetReply::Hit {
            flags: u32::MAX,
            ttl: i64::MAX,
            data: 39..39
        }
    );
    assert!(parse_get_reply(b"VA 2 f1\r\nabc\r\n").is_err());
}

#[test]
fn binary_quiet_adds_and_their_answers() {
    let mut out = Vec::new();
    push_addq(&mut out, b"k y", 7, 100, b"xyz");
    let mut want = vec![0x80, 0x12, 0, 3, 8, 0, 0, 0, 0, 0, 0, 14];
    want.extend_from_slice(&[0; 12]);
    want.extend_from_slice(&[0, 0, 0, 7, 0, 0, 0, 100]);
    want.extend_from_slice(b"k yxyz");
    assert_eq!(out, want);
    let mut req = Vec::new();
    let (odd, plain) = (push_get(&mut req, b"k y"), push_get(&mut req, b"kz"));
    let mut scratch = Vec::new();
    assert_eq!(raw_key(odd, &req, &mut scratch), b"k y");
    assert_eq!(raw_key(plain, &req, &mut scratch), b"kz");
    let answer = |op: u8, status: u16, body: &[u8]| {
        let mut h = vec![0x81, op, 0, 0, 0, 0];
        h.extend_from_slice(&status.to_be_bytes());
        h.extend_from_slice(&(body.len() as u32).to_be_bytes());
        h.extend_from_slice(&[0; 12]);
        h.extend_from_slice(body);
        h
    };
    assert_eq!(
        parse_bin_reply(&answer(0x0a, 0, b"")).unwrap(),
        Some((SetReply::Synced, 24))
    );
    assert_eq!(
        parse_bin_reply(&answer(0x12, 2, b"Data exists for key.")).unwrap(),
        Some((SetReply::Exists, 44))
    );
    let big = answer(0x12, 3, b"Too large.");
    assert_eq!(
        parse_bin_reply(&big).unwrap(),
        Some((
            SetReply::Failed("binary status 0x0003: Too large.".into()),
            34
        ))
    );
    for cut in 0..big.len() {
        assert_eq!(parse_bin_reply(&big[..cut]).unwrap(), None, "cut at {cut}");
    }
    assert!(parse_bin_reply(b"SERVER_ERROR out of memory\r\n").is_err());
    assert_eq!(BIN_NOOP[..2], [0x80, 0x0a]);
}

#[test]
fn ttls_keep_the_moment_of_expiry() {
    let now = 1_800_000_000;
    assert_eq!(dest_ttl(-1, now), 0);
    assert_eq!(dest_ttl(0, now), 1);
    assert_eq!(dest_ttl(100, now), 100);
    assert_eq!(dest_ttl(RELATIVE_TTL_LIMIT, now), RELATIVE_TTL_LIMIT);
    assert_eq!(
        dest_ttl(RELATIVE_TTL_LIMIT + 1, now),
        now + RELATIVE_TTL_LIMIT + 1
    );
}

#[test]
fn sets_are_quiet_and_add_mode() {
    let mut req = Vec::new();
    let k = push_get(&mut req, b"a b");
    let mut out = Vec::new();
    push_set(&mut out, k, &req, 7, 100, b"xyz");
    assert_eq!(out, b"ms YSBi 3 b T100 F7 ME q\r\nxyz\r\n");
    assert_eq!(
        parse_set_reply(b"MN\r\nNS\r\n"),
        Some((SetReply::Synced, 4))
    );
    assert_eq!(parse_set_reply(b"HD\r\n"), Some((SetReply::Stored, 4)));
    assert_eq!(parse_set_reply(b"NS\r\n"), Some((SetReply::Exists, 4)));
    assert_eq!(
        parse_set_reply(b"SERVER_ERROR object too large for cache\r\n"),
        Some((
            SetReply::Failed("SERVER_ERROR object too large for cache".into()),
            41
        ))
    );
    assert_eq!(parse_set_reply(b"HD\r"), None);
}
