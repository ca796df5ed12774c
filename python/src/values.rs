//! Python objects <-> the Rust client's keys, values and server specs.
//!
//! Under the mnemo and python profiles values follow the Python family's flags (see
//! `mnemo_client::serde`): `bytes` as they are (0), `str` as UTF-8 (16), `int` that fits 64 bits
//! as decimal text (2, so incr/decr work on it), anything else (bool, float, big int, containers,
//! objects, subclasses of those) pickled (1). Under the PHP, Perl and Java profiles `bool` and
//! `float` are the family's own types and nothing is pickled (those clients could not read it).
//! Reading gives back the same Python types; a pickle is unpickled here, another language's
//! serialized object comes back as `mnemo.Serialized` (its bytes and `format`), unknown flags as
//! bytes.

use crate::errors;
use mnemo_client::profile::reader_for;
use mnemo_client::serde::{self, Kind};
use mnemo_client::{FlagProfile, Serialization, ServerSpec, Value, ValueRef};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyBytes, PyFloat, PyInt, PyString, PyTuple};

/// A value converted while the GIL is held, owned so the I/O can run without it.
pub(crate) enum OwnedValue {
    Bytes(Vec<u8>),
    Text(String),
    Int(i64),
    Float(f64),
    Bool(bool),
    Pickled(Vec<u8>),
    Serialized(Serialization, Vec<u8>),
}

impl OwnedValue {
    pub fn as_ref(&self) -> ValueRef<'_> {
        match self {
            OwnedValue::Bytes(b) => ValueRef::Bytes(b),
            OwnedValue::Text(s) => ValueRef::Text(s),
            OwnedValue::Int(i) => ValueRef::Int(*i),
            OwnedValue::Float(f) => ValueRef::Float(*f),
            OwnedValue::Bool(b) => ValueRef::Bool(*b),
            OwnedValue::Pickled(b) => ValueRef::Pickled(b),
            OwnedValue::Serialized(format, data) => ValueRef::Serialized {
                format: *format,
                data,
            },
        }
    }
}

fn pickle<'py>(py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyAny>> {
    static PICKLE: PyOnceLock<Py<PyModule>> = PyOnceLock::new();
    let m = PICKLE.get_or_try_init(py, || Ok::<_, PyErr>(py.import("pickle")?.unbind()))?;
    m.bind(py).getattr(name)
}

pub(crate) fn to_value(
    obj: &Bound<'_, PyAny>,
    protocol: i32,
    profile: FlagProfile,
) -> PyResult<OwnedValue> {
    // Exact types only, as pymemcache's pickle_serde: a subclass (Django's SafeString, bool,
    // an IntEnum) is pickled so it reads back as itself.
    if let Ok(b) = obj.cast_exact::<PyBytes>() {
        return Ok(OwnedValue::Bytes(b.as_bytes().to_vec()));
    }
    if let Ok(s) = obj.cast_exact::<PyString>() {
        return Ok(OwnedValue::Text(s.to_str()?.to_owned()));
    }
    if obj.cast_exact::<PyInt>().is_ok() {
        if let Ok(i) = obj.extract::<i64>() {
            return Ok(OwnedValue::Int(i));
        }
    }
    if profile.has_own_types() {
        if let Ok(b) = obj.cast_exact::<PyBool>() {
            return Ok(OwnedValue::Bool(b.is_true()));
        }
        if let Ok(f) = obj.cast_exact::<PyFloat>() {
            return Ok(OwnedValue::Float(f.value()));
        }
        // An object read from this family, stored back as it came (the profile refuses a
        // serialization its clients do not read).
        if obj.is_instance(serialized_class(obj.py())?)? {
            let name: String = obj.getattr("format")?.extract()?;
            let format = Serialization::from_name(&name).ok_or_else(|| {
                errors::illegal(obj.py(), format!("unknown serialization {name:?}"))
            })?;
            return Ok(OwnedValue::Serialized(
                format,
                obj.cast::<PyBytes>()?.as_bytes().to_vec(),
            ));
        }
        return Err(errors::illegal(
            obj.py(),
            format!(
                "the {} profile stores bytes, str, int (64-bit), float and bool, not {}: \
                 its clients cannot read a pickle",
                profile.name(),
                obj.get_type().name()?
            ),
        ));
    }
    let pickled = pickle(obj.py(), "dumps")?.call1((obj, protocol))?;
    Ok(OwnedValue::Pickled(
        pickled.cast_into::<PyBytes>()?.as_bytes().to_vec(),
    ))
}

/// Raw bytes for append/prepend (str as UTF-8, int as its decimal text).
pub(crate) fn to_raw(obj: &Bound<'_, PyAny>) -> PyResult<Vec<u8>> {
    if let Ok(b) = obj.cast::<PyBytes>() {
        return Ok(b.as_bytes().to_vec());
    }
    if let Ok(s) = obj.cast::<PyString>() {
        return Ok(s.to_str()?.as_bytes().to_vec());
    }
    if obj.cast_exact::<PyInt>().is_ok() {
        return Ok(obj.str()?.to_str()?.as_bytes().to_vec());
    }
    Err(errors::illegal(
        obj.py(),
        format!(
            "append/prepend take bytes, str or int, not {}",
            obj.get_type().name()?
        ),
    ))
}

pub(crate) fn from_value(py: Python<'_>, v: Value) -> PyResult<Py<PyAny>> {
    Ok(match v {
        Value::Bytes(b) | Value::Other { data: b, .. } => PyBytes::new(py, &b).into_any().unbind(),
        Value::Text(s) => PyString::new(py, &s).into_any().unbind(),
        Value::Int(i) => i.into_pyobject(py)?.into_any().unbind(),
        Value::Float(f) => PyFloat::new(py, f).into_any().unbind(),
        Value::Bool(b) => boolean(py, b)?,
        Value::Pickled(b) => pickle(py, "loads")?
            .call1((PyBytes::new(py, &b),))?
            .unbind(),
        Value::Serialized { format, data } => serialized_class(py)?
            .call1((PyBytes::new(py, &data), format.name()))?
            .unbind(),
    })
}

fn serialized_class(py: Python<'_>) -> PyResult<&Bound<'_, PyAny>> {
    static CLS: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    Ok(CLS
        .get_or_try_init(py, || {
            Ok::<_, PyErr>(py.import("mnemo")?.getattr("Serialized")?.unbind())
        })?
        .bind(py))
}

/// A stored value's object from its decompressed bytes and flags, as [`from_value`] would make
/// it, with one pass over the bytes: text is checked as UTF-8 by Python while it builds the str
/// (`from_value` gets a String the Rust side has checked already, and Python checks it again).
/// `readers`: the client's profiles (writing one first); the PHP, Perl and Java families' types
/// are decoded by the Rust client.
pub(crate) fn from_raw(
    py: Python<'_>,
    readers: &[FlagProfile],
    data: &[u8],
    flags: u32,
) -> PyResult<Py<PyAny>> {
    let reader = reader_for(readers, flags);
    if reader.has_own_types() {
        let v = reader
            .decode_plain(data.to_vec(), flags)
            .map_err(|e| errors::to_py(py, e))?;
        return from_value(py, v);
    }
    Ok(match Kind::of(flags) {
        Kind::Bytes | Kind::Other => PyBytes::new(py, data).into_any().unbind(),
        Kind::Text => {
            let len = isize::try_from(data.len()).expect("a value fits in memory");
            // SAFETY: data is valid for len bytes; the errors argument is a C string literal.
            let obj = unsafe {
                pyo3::ffi::PyUnicode_DecodeUTF8(data.as_ptr().cast(), len, c"strict".as_ptr())
            };
            // SAFETY: a new reference, or NULL with the UnicodeDecodeError set.
            match unsafe { Bound::from_owned_ptr_or_err(py, obj) } {
                Ok(s) => s.unbind(),
                Err(_) => return Err(errors::to_py(py, serde::not_utf8(flags))),
            }
        }
        Kind::Int => serde::parse_int(data, flags)
            .map_err(|e| errors::to_py(py, e))?
            .into_pyobject(py)?
            .into_any()
            .unbind(),
        Kind::Pickled => pickle(py, "loads")?
            .call1((PyBytes::new(py, data),))?
            .unbind(),
    })
}

/// A key: `str` (as UTF-8) or `bytes`, after `prefix` (the client's key_prefix). Validity
/// (length, spaces, control characters) is checked by the Rust client.
pub(crate) fn to_key(prefix: &[u8], obj: &Bound<'_, PyAny>) -> PyResult<Vec<u8>> {
    let raw = key_bytes(obj)?;
    let mut key = Vec::with_capacity(prefix.len() + raw.len());
    key.extend_from_slice(prefix);
    key.extend_from_slice(raw);
    Ok(key)
}

/// A key's own bytes: a `str` as UTF-8 or a `bytes`.
fn key_bytes<'a>(obj: &'a Bound<'_, PyAny>) -> PyResult<&'a [u8]> {
    if let Ok(s) = obj.cast::<PyString>() {
        Ok(s.to_str()?.as_bytes())
    } else if let Ok(b) = obj.cast::<PyBytes>() {
        Ok(b.as_bytes())
    } else {
        Err(errors::illegal(
            obj.py(),
            format!("a key is str or bytes, not {}", obj.get_type().name()?),
        ))
    }
}

/// `"host:port[:weight]"` (several separated by commas), `(host, port[, weight])`, or a list of
/// those.
pub(crate) fn to_servers(obj: &Bound<'_, PyAny>) -> PyResult<Vec<ServerSpec>> {
    let py = obj.py();
    let one = |o: &Bound<'_, PyAny>| -> PyResult<Vec<ServerSpec>> {
        if let Ok(s) = o.cast::<PyString>() {
            return ServerSpec::parse_list(s.to_str()?)
                .map_err(|e| errors::illegal(py, e.to_string()));
        }
        if let Ok(t) = o.cast::<PyTuple>() {
            let host: String = t.get_item(0)?.extract()?;
            let port: u16 = t.get_item(1)?.extract()?;
            let weight: u32 = if t.len() > 2 {
                t.get_item(2)?.extract()?
            } else {
                1
            };
            if port == 0 || weight == 0 {
                return Err(errors::illegal(
                    py,
                    format!("bad server {t}: port and weight must be at least 1"),
                ));
            }
            return Ok(vec![ServerSpec::new(host, port).with_weight(weight)]);
        }
        Err(errors::illegal(
            py,
            format!("a server is \"host:port[:weight]\" or (host, port[, weight]), not {o}"),
        ))
    };
    // A bare tuple or string is one server (pymemcache.Client's form); otherwise a sequence.
    if obj.cast::<PyString>().is_ok()
        || obj
            .cast::<PyTuple>()
            .map(|t| {
                t.len() >= 2
                    && t.get_item(0)
                        .map(|h| h.cast::<PyString>().is_ok())
                        .unwrap_or(false)
            })
            .unwrap_or(false)
    {
        return one(obj);
    }
    let mut out = Vec::new();
    for item in obj.try_iter()? {
        out.extend(one(&item?)?);
    }
    Ok(out)
}

// ---- small conversions of the client's arguments and results ------------------------------

pub(crate) fn cas_token(obj: &Bound<'_, PyAny>) -> PyResult<u64> {
    if let Ok(b) = obj.cast::<PyBytes>() {
        if let Some(v) = std::str::from_utf8(b.as_bytes())
            .ok()
            .and_then(|s| s.parse().ok())
        {
            return Ok(v);
        }
        return Err(errors::illegal(obj.py(), format!("bad cas token {obj}")));
    }
    obj.extract::<u64>()
}

/// Many keys for the wire in one buffer: one allocation for a 100-key get_many, not 100.
#[derive(Default)]
pub(crate) struct KeyBuf {
    bytes: Vec<u8>,
    /// Where each key ends in `bytes`.
    ends: Vec<usize>,
}

impl KeyBuf {
    fn push(&mut self, prefix: &[u8], key: &[u8]) {
        self.bytes.extend_from_slice(prefix);
        self.bytes.extend_from_slice(key);
        self.ends.push(self.bytes.len());
    }

    /// The keys as slices, in the order given.
    pub fn slices(&self) -> Vec<&[u8]> {
        let mut start = 0;
        self.ends
            .iter()
            .map(|&end| {
                let k = &self.bytes[start..end];
                start = end;
                k
            })
            .collect()
    }
}

/// Keys as bytes for the wire, and the caller's own objects for the result.
pub(crate) type Keys = (KeyBuf, Vec<Py<PyAny>>);

pub(crate) fn keys_of(prefix: &[u8], keys: &Bound<'_, PyAny>) -> PyResult<Keys> {
    let mut raw = KeyBuf::default();
    let mut orig = Vec::new();
    for k in keys.try_iter()? {
        let k = k?;
        raw.push(prefix, key_bytes(&k)?);
        orig.push(k.unbind());
    }
    Ok((raw, orig))
}

pub(crate) fn none(py: Python<'_>) -> Py<PyAny> {
    py.None()
}

pub(crate) fn boolean(py: Python<'_>, b: bool) -> PyResult<Py<PyAny>> {
    Ok(pyo3::types::PyBool::new(py, b)
        .to_owned()
        .into_any()
        .unbind())
}

/// A stats value as pymemcache gives it: int, float, or the bytes as sent.
pub(crate) fn stat_value(py: Python<'_>, v: &str) -> PyResult<Py<PyAny>> {
    if let Ok(i) = v.parse::<i64>() {
        return Ok(i.into_pyobject(py)?.into_any().unbind());
    }
    if v.contains('.') && v.chars().all(|c| c.is_ascii_digit() || c == '.') {
        if let Ok(f) = v.parse::<f64>() {
            return Ok(f.into_pyobject(py)?.into_any().unbind());
        }
    }
    Ok(PyBytes::new(py, v.as_bytes()).into_any().unbind())
}

pub(crate) fn counter(py: Python<'_>, v: Option<u64>, noreply: bool) -> PyResult<Py<PyAny>> {
    match v {
        Some(v) if !noreply => Ok(v.into_pyobject(py)?.into_any().unbind()),
        _ => Ok(none(py)),
    }
}

pub(crate) fn filter_part_class(py: Python<'_>) -> PyResult<&Bound<'_, PyAny>> {
    static CLS: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    Ok(CLS
        .get_or_try_init(py, || {
            Ok::<_, PyErr>(py.import("mnemo")?.getattr("FilterPart")?.unbind())
        })?
        .bind(py))
}
