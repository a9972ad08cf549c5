//! Shared logic of the `read_observer` and `write_pipeline` fuzz targets; see `harness.rs`.

pub mod harness;
