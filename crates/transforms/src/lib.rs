//! Image decoders, Pillow-exact transforms and batch buffers for dataloader-rs.
