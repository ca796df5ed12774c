//! The constructor's value settings: profile names and the compression arguments become the
//! Rust client's flag profiles and [`Compression`], the profile's defaults filling in what the
//! caller left out (`compression="default"`, `compress_threshold=None`, ...).

use crate::errors;
use mnemo_client::{Algorithm, Compression, FlagProfile};
use pyo3::prelude::*;

pub(crate) struct ValueSettings {
    pub profile: FlagProfile,
    pub also_read: Vec<FlagProfile>,
    pub compression: Compression,
}

pub(crate) fn value_settings(
    py: Python<'_>,
    profile: &str,
    also_read: &[String],
    compression: Option<&str>,
    level: Option<i32>,
    threshold: Option<usize>,
    min_saving: Option<f64>,
) -> PyResult<ValueSettings> {
    let name = |n: &str| FlagProfile::from_name(n).map_err(|e| errors::to_py(py, e));
    let profile = name(profile)?;
    let also_read = also_read
        .iter()
        .map(|n| name(n))
        .collect::<PyResult<Vec<_>>>()?;
    let defaults = profile.default_compression();
    // "default": the profile's algorithm; zlib under mnemo's (what the Python clients read; the
    // mnemo profile reads zlib and zstd whatever this client writes).
    let compression = match compression {
        Some("default") => Some(match (profile, defaults.algorithm) {
            (FlagProfile::Mnemo, _) | (_, Algorithm::Zlib { .. }) => "zlib",
            (_, Algorithm::Gzip { .. }) => "gzip",
            (_, Algorithm::Zstd { .. }) => "zstd",
        }),
        other => other,
    };
    let deflate_level = level.map_or(Algorithm::ZLIB_DEFAULT_LEVEL, |l| l.clamp(0, 9) as u32);
    let algorithm = match compression {
        None | Some("zlib") => Algorithm::Zlib {
            level: deflate_level,
        },
        Some("gzip") => Algorithm::Gzip {
            level: deflate_level,
        },
        Some("zstd") => Algorithm::Zstd {
            level: level.unwrap_or(Algorithm::ZSTD_DEFAULT_LEVEL),
        },
        Some(other) => {
            return Err(errors::illegal(
                py,
                format!(
                "compression is \"default\", \"zlib\", \"gzip\", \"zstd\" or None, not {other:?}"
            ),
            ))
        }
    };
    let min_saving = min_saving.unwrap_or(defaults.min_saving);
    if !(0.0..1.0).contains(&min_saving) {
        return Err(errors::illegal(
            py,
            format!("min_compress_saving is a fraction in [0, 1), not {min_saving}"),
        ));
    }
    Ok(ValueSettings {
        profile,
        also_read,
        compression: Compression {
            enabled: compression.is_some(),
            algorithm,
            threshold: threshold.unwrap_or(defaults.threshold),
            min_saving,
            skip_compressed_formats: true,
        },
    })
}
