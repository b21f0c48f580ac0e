//! Integration tests of dlrs-io through its public API.

mod fork;
