//! Values cross between mnemo-client and the real PHP, Perl and (where a JDK and the
//! xmemcached jar are present; skipped with the reason printed otherwise) Java clients, both
//! ways, every type plain and compressed, on mnemod and on memcached: the families' clients
//! write (tests/profiles/values.php, values.pl, Values.java), mnemo-client reads with that
//! family's profile; mnemo-client writes with the profile, the clients read.
//! Each test prints its part of the round-trip table (family x type x compressed, pass counts):
//! `cargo test -p mnemo-client --test profiles -- --nocapture --test-threads 1`.

mod common;

use common::Server;
use mnemo_client::{blocking, Config, FlagProfile, Serialization, ServerSpec, Value};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

fn script(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/profiles")
        .join(name)
}

/// Whether a family's real clients are here; a loud skip (a failure under CI) when not.
fn have(what: &str, probe: &mut Command, install: &str) -> bool {
    let ok = probe.output().map(|o| o.status.success()).unwrap_or(false);
    if !ok {
        let ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
        assert!(!ci, "{what} missing under CI: install {install}");
        eprintln!("\nSKIPPED: {what} is not installed (apt-get install {install}; scripts/test.sh does)\n");
    }
    ok
}

fn have_php() -> bool {
    have(
        "PHP with the memcached and memcache extensions",
        Command::new("php").args([
            "-r",
            "exit(class_exists('Memcached') && class_exists('Memcache') ? 0 : 1);",
        ]),
        "php-cli php-memcached php-memcache",
    )
}

fn have_perl() -> bool {
    have(
        "Perl's Cache::Memcached and Cache::Memcached::Fast",
        Command::new("perl").args(["-MCache::Memcached", "-MCache::Memcached::Fast", "-e1"]),
        "libcache-memcached-perl libcache-memcached-fast-perl",
    )
}

/// xmemcached's class path: $MNEMO_JAVA_CP, else xmemcached 2.4.8 and slf4j-api from the
/// local Maven repository (scripts/test.sh fetches them with `mvn dependency:get` where Maven
/// is installed). None, with the reason printed, without a JDK or the jars.
fn java_classpath() -> Option<String> {
    if let Ok(cp) = std::env::var("MNEMO_JAVA_CP") {
        return Some(cp);
    }
    let m2 = PathBuf::from(std::env::var("HOME").unwrap_or_default()).join(".m2/repository");
    let xm = m2.join("com/googlecode/xmemcached/xmemcached/2.4.8/xmemcached-2.4.8.jar");
    let slf4j = std::fs::read_dir(m2.join("org/slf4j/slf4j-api"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|d| {
            let v = d.file_name().into_string().ok()?;
            let jar = d.path().join(format!("slf4j-api-{v}.jar"));
            jar.exists().then_some(jar)
        })
        .max();
    let java = Command::new("java")
        .arg("-version")
        .output()
        .is_ok_and(|o| o.status.success());
    let why = match (java, xm.exists(), slf4j) {
        (true, true, Some(slf4j)) => return Some(format!("{}:{}", xm.display(), slf4j.display())),
        (false, _, _) => "no JDK (java) here".to_owned(),
        (_, false, _) => format!(
            "no xmemcached jar at {} (mvn dependency:get \
             -Dartifact=com.googlecode.xmemcached:xmemcached:2.4.8; scripts/test.sh does)",
            xm.display()
        ),
        _ => "no slf4j-api jar in ~/.m2 (xmemcached needs it)".to_owned(),
    };
    eprintln!("\nSKIPPED (the Java side): {why}\n");
    None
}

/// Run the Java side (the JDK's source-file mode) with the class path.
fn run_java(cp: &str, args: &[&str]) -> String {
    let src = script("Values.java");
    let mut a = vec!["-cp", cp, src.to_str().unwrap()];
    a.extend_from_slice(args);
    run_cmd("java", &a, "Values.java")
}

/// Run a script; its stdout, or a panic with its stderr.
fn run(cmd: &str, file: &str, args: &[&str]) -> String {
    let path = script(file);
    let mut a = vec![path.to_str().unwrap()];
    a.extend_from_slice(args);
    run_cmd(cmd, &a, file)
}

fn run_cmd(cmd: &str, args: &[&str], file: &str) -> String {
    let out = Command::new(cmd)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("run {cmd}: {e}"));
    assert!(
        out.status.success(),
        "{file} {args:?} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn text(b: &[u8]) -> &str {
    std::str::from_utf8(b).unwrap()
}

fn profile_of(client: &str) -> FlagProfile {
    match client {
        "php-memcached" => FlagProfile::PhpMemcached,
        "php-memcache" => FlagProfile::PhpMemcache,
        c if c.starts_with("perl") => FlagProfile::Perl,
        "java" => FlagProfile::Java,
        c => panic!("client {c}"),
    }
}

fn client(srv: &Server, profile: FlagProfile) -> blocking::Client {
    blocking::Client::new(
        vec![ServerSpec::new("127.0.0.1", srv.port)],
        Config::for_profile(profile),
    )
    .unwrap()
}

/// The value a script's (kind, payload) line stands for.
fn expected(kind: &str, p: Vec<u8>) -> Value {
    let format = |f: &str| match f {
        "php" => Serialization::Php,
        "igbinary" => Serialization::Igbinary,
        "json" => Serialization::Json,
        "msgpack" => Serialization::Msgpack,
        "perl-storable" => Serialization::PerlStorable,
        "java" => Serialization::Java,
        f => panic!("format {f}"),
    };
    match kind {
        "bytes" => Value::Bytes(p),
        "text" => Value::Text(String::from_utf8(p).unwrap()),
        "int" => Value::Int(text(&p).parse().unwrap()),
        "float" => Value::Float(text(&p).parse().unwrap()),
        "bool" => Value::Bool(p == b"1"),
        k => match k.strip_prefix("ser:") {
            Some(f) => Value::Serialized {
                format: format(f),
                data: p,
            },
            None => panic!("kind {k}"),
        },
    }
}

/// Pass counts: (family, direction, type, compressed) -> (passed, run).
#[derive(Default)]
struct Table(BTreeMap<(String, &'static str, String, bool), (u32, u32)>);

impl Table {
    fn count(&mut self, family: &str, dir: &'static str, kind: &str, compressed: bool, ok: bool) {
        let e = self
            .0
            .entry((family.to_owned(), dir, kind.to_owned(), compressed))
            .or_default();
        e.0 += u32::from(ok);
        e.1 += 1;
    }

    /// Print the table; panic with the failures if there are any (each cut to a few lines:
    /// the values are up to 100 KB).
    fn finish(self, failures: Vec<String>) {
        let failures: Vec<String> = failures
            .into_iter()
            .map(|f| match f.char_indices().nth(400) {
                Some((i, _)) => format!("{} ...", &f[..i]),
                None => f,
            })
            .collect();
        println!("\nfamily          direction        type                compressed  passed/run (mnemod + memcached)");
        for ((fam, dir, kind, c), (ok, n)) in &self.0 {
            let c = if *c { "yes" } else { "no" };
            println!("{fam:<15} {dir:<16} {kind:<19} {c:<11} {ok}/{n}");
        }
        let (ok, n) = self.0.values().fold((0, 0), |a, v| (a.0 + v.0, a.1 + v.1));
        println!("total {ok}/{n}");
        assert!(
            failures.is_empty(),
            "{} failed:\n{}",
            failures.len(),
            failures.join("\n")
        );
    }
}

#[test]
fn php_perl_and_java_clients_write_mnemo_client_reads() {
    let (php, perl, java) = (have_php(), have_perl(), java_classpath());
    let mut table = Table::default();
    let mut failures = Vec::new();
    for srv in Server::both(&[]) {
        let mut lines = String::new();
        if php {
            lines += &run("php", "values.php", &["write", &srv.addr(), "w:"]);
        }
        if perl {
            lines += &run("perl", "values.pl", &["write", &srv.addr(), "w:"]);
        }
        if let Some(cp) = &java {
            lines += &run_java(cp, &["write", &srv.addr(), "w:"]);
        }
        for line in lines.lines() {
            let f: Vec<&str> = line.split('\t').collect();
            let (key, who, kind, compressed) = (f[0], f[1], f[2], f[3] == "1");
            let want = expected(kind, hex(f[4]));
            let profile = profile_of(who);
            let c = client(&srv, profile);
            let raw = c
                .get_raw(key)
                .unwrap()
                .unwrap_or_else(|| panic!("{key} missing"));
            let stored_compressed = raw.flags & profile.compression_bits() != 0;
            let got = c.get(key);
            let ok = stored_compressed == compressed && matches!(&got, Ok(Some(v)) if *v == want);
            if !ok {
                failures.push(format!(
                    "{who} wrote {key} on {} (flags {:#x}, compressed {stored_compressed}, \
                     expected {compressed}): read {got:?}, expected {want:?}",
                    srv.name, raw.flags
                ));
            }
            table.count(who, "client -> rust", kind, compressed, ok);
            // Perl's and Java's values read the same by a client that reads both (its own
            // family first: flag 0 is Perl's byte string, Java's String).
            if profile == FlagProfile::Perl || profile == FlagProfile::Java {
                let other = if profile == FlagProfile::Perl {
                    FlagProfile::Java
                } else {
                    FlagProfile::Perl
                };
                let cfg = Config {
                    also_read: vec![other],
                    ..Config::for_profile(profile)
                };
                let both = blocking::Client::new(vec![ServerSpec::new("127.0.0.1", srv.port)], cfg)
                    .unwrap();
                let got2 = both.get(key);
                if !matches!(&got2, Ok(Some(v)) if *v == want) {
                    failures.push(format!(
                        "{who} wrote {key}: read with {profile:?}+{other:?}: {got2:?}"
                    ));
                }
            }
        }
    }
    table.finish(failures);
}

/// What mnemo writes: (key, value). The long ones pass every family's threshold (Java: 16 KB,
/// php-memcache: 20000 bytes) and compress.
/// An object serialized the family's way (what mnemo read from one of its clients, stored
/// back): PHP's `serialize([1, 2])`, Perl's `nfreeze([1, 2])`, Java's `ArrayList` of "a", "b".
fn serialized_case(profile: FlagProfile) -> (Serialization, Vec<u8>) {
    match profile {
        FlagProfile::PhpMemcached | FlagProfile::PhpMemcache => {
            (Serialization::Php, b"a:2:{i:0;i:1;i:1;i:2;}".to_vec())
        }
        FlagProfile::Perl => (
            Serialization::PerlStorable,
            b"\x05\x0b\x02\x00\x00\x00\x02\x08\x81\x08\x82".to_vec(),
        ),
        FlagProfile::Java => (
            Serialization::Java,
            hex(
                "aced0005737200136a6176612e7574696c2e41727261794c6973747881d21d99c7619d03000149\
                 000473697a65787000000002770400000002740001617400016278",
            ),
        ),
        p => panic!("{p:?}"),
    }
}

fn mnemo_cases(profile: FlagProfile) -> Vec<(&'static str, Value)> {
    let (format, data) = serialized_case(profile);
    let long: String = (0..6000).map(|i| format!("wörd{} ", i % 97)).collect();
    let mut long_bytes = long.clone().into_bytes();
    long_bytes.extend_from_slice(b"\x00\xff\xfe");
    vec![
        ("bytes", Value::Bytes(b"\x00\x01bin\xff".to_vec())),
        ("text", Value::Text("héllo wörld".into())),
        ("int", Value::Int(-42)),
        ("bigint", Value::Int(1_234_567_890_123)),
        ("float", Value::Float(0.1)),
        ("huge", Value::Float(-1e100)),
        ("true", Value::Bool(true)),
        ("false", Value::Bool(false)),
        ("long", Value::Text(long)),
        ("longbytes", Value::Bytes(long_bytes)),
        ("serialized", Value::Serialized { format, data }),
    ]
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Bytes(_) => "bytes",
        Value::Text(_) => "text",
        Value::Int(_) => "int",
        Value::Float(_) => "float",
        Value::Bool(_) => "bool",
        Value::Serialized { format, .. } => match format {
            Serialization::Php => "ser:php",
            Serialization::PerlStorable => "ser:perl-storable",
            Serialization::Java => "ser:java",
            _ => "ser:other",
        },
        _ => "other",
    }
}

/// Whether a family's client read `v` back as the same type: the (type, payload) its script
/// printed. PHP's strings are bytes; Perl's scalars carry no type (numbers and booleans are
/// their text), and only ::Fast (utf8 => 1) marks character strings.
fn read_back(who: &str, v: &Value, ty: &str, p: &[u8]) -> bool {
    let float_is = |f: f64| std::str::from_utf8(p).ok().and_then(|s| s.parse().ok()) == Some(f);
    match who {
        "php-memcached" | "php-memcache" => match v {
            Value::Bytes(b) => ty == "string" && p == b.as_slice(),
            Value::Text(s) => ty == "string" && p == s.as_bytes(),
            Value::Int(i) => ty == "integer" && p == i.to_string().as_bytes(),
            Value::Float(f) => ty == "double" && float_is(*f),
            Value::Bool(b) => ty == "boolean" && p == if *b { b"1" } else { b"0" },
            // The script prints an array as serialize() of it.
            Value::Serialized { data, .. } => ty == "array" && p == data.as_slice(),
            _ => false,
        },
        "perl-fast" | "perl-classic" => match v {
            Value::Bytes(b) => ty == "bytes" && p == b.as_slice(),
            Value::Text(s) => {
                ty == if who == "perl-fast" { "text" } else { "bytes" } && p == s.as_bytes()
            }
            Value::Int(i) => ty == "bytes" && p == i.to_string().as_bytes(),
            Value::Float(f) => ty == "bytes" && float_is(*f),
            Value::Bool(b) => ty == "bytes" && p == if *b { &b"1"[..] } else { b"" },
            // The script prints a reference as nfreeze() of it.
            Value::Serialized { data, .. } => ty == "ser:perl-storable" && p == data.as_slice(),
            _ => false,
        },
        "java" => match v {
            Value::Bytes(b) => ty == "byte[]" && p == b.as_slice(),
            Value::Text(s) => ty == "String" && p == s.as_bytes(),
            Value::Int(i) => ty == "Long" && p == i.to_string().as_bytes(),
            Value::Float(f) => ty == "Double" && float_is(*f),
            Value::Bool(b) => ty == "Boolean" && p == if *b { b"1" } else { b"0" },
            Value::Serialized { .. } => ty == "ArrayList" && p == b"[a, b]",
            _ => false,
        },
        _ => false,
    }
}

#[test]
fn mnemo_client_writes_php_perl_and_java_clients_read() {
    let (php, perl, java) = (have_php(), have_perl(), java_classpath());
    let mut families: Vec<(FlagProfile, &str, &str, Vec<&str>)> = Vec::new();
    if php {
        families.push((
            FlagProfile::PhpMemcached,
            "php",
            "values.php",
            vec!["php-memcached"],
        ));
        families.push((
            FlagProfile::PhpMemcache,
            "php",
            "values.php",
            vec!["php-memcache"],
        ));
    }
    if perl {
        families.push((
            FlagProfile::Perl,
            "perl",
            "values.pl",
            vec!["perl-fast", "perl-classic"],
        ));
    }
    if java.is_some() {
        families.push((FlagProfile::Java, "java", "Values.java", vec!["java"]));
    }
    let mut table = Table::default();
    let mut failures = Vec::new();
    for srv in Server::both(&[]) {
        for (profile, cmd, file, readers) in &families {
            let c = client(&srv, *profile);
            let cases = mnemo_cases(*profile);
            let mut compressed = BTreeMap::new();
            for (k, v) in &cases {
                let key = format!("r:{}:{k}", profile.name());
                c.set(&key, v, 0).unwrap();
                let flags = c.get_raw(&key).unwrap().unwrap().flags;
                compressed.insert(key, flags & profile.compression_bits() != 0);
            }
            let keyfile = std::env::temp_dir().join(format!(
                "mnemo-profiles-{}-{}-{}.txt",
                std::process::id(),
                srv.port,
                profile.name()
            ));
            std::fs::write(
                &keyfile,
                compressed.keys().cloned().collect::<Vec<_>>().join("\n"),
            )
            .unwrap();
            for who in readers {
                let args = ["read", &srv.addr(), keyfile.to_str().unwrap(), who];
                let out = match &java {
                    Some(cp) if *cmd == "java" => run_java(cp, &args[..3]),
                    _ => run(cmd, file, &args),
                };
                let mut seen = 0;
                for line in out.lines() {
                    let f: Vec<&str> = line.split('\t').collect();
                    let (key, ty, p) = (f[0], f[2], hex(f[3]));
                    let k = key.rsplit(':').next().unwrap();
                    let v = &cases.iter().find(|(c, _)| *c == k).unwrap().1;
                    let ok = read_back(who, v, ty, &p);
                    if !ok {
                        failures.push(format!(
                            "{who} read {key} on {}: {ty} {:?}, mnemo wrote {v:?}",
                            srv.name,
                            String::from_utf8_lossy(&p)
                        ));
                    }
                    table.count(who, "rust -> client", kind_of(v), compressed[key], ok);
                    seen += 1;
                }
                assert_eq!(seen, cases.len(), "{who} read every key");
            }
            let _ = std::fs::remove_file(&keyfile);
            // The two long values were compressed; the per-call switch stores them plain.
            assert_eq!(
                compressed.values().filter(|c| **c).count(),
                2,
                "{profile:?}"
            );
        }
    }
    table.finish(failures);
}
