//! Integration tests of `dlrs-core`: whole epochs through the public API.

mod epochs;
mod workers;
