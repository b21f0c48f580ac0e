//! `dlrs`: the command-line front of dataloader-rs.
fn main() {
    println!("dlrs {}", env!("CARGO_PKG_VERSION"));
}
