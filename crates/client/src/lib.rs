//! mnemo-client (in progress).
pub mod codec;
