//! mnemo-client (in progress).
pub mod codec;
pub mod ketama;
