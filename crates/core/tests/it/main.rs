//! Integration tests of `dlrs-core`: whole epochs through the public API.

mod alloc;
mod epochs;

#[global_allocator]
static ALLOCATOR: alloc::Counting = alloc::Counting;
