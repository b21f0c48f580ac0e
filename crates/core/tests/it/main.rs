//! Integration tests of `dlrs-core`: whole epochs through the public API.

mod alloc;
mod epochs;
mod workers;

#[global_allocator]
static ALLOCATOR: alloc::Counting = alloc::Counting;
