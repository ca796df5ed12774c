//! mnemo-client (in progress).
