//! HTTP, file and object-store datasets for dataloader-rs, fetched on a tokio runtime.
