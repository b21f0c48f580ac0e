//! Helpers shared by the fuzz targets.

/// The offsets of a tar header's checksum field.
const CHECKSUM: std::ops::Range<usize> = 148..156;

/// Rewrites the checksum of every 512-byte block that may be a tar header: the first one and
/// each that carries the ustar magic (POSIX or GNU). Mutated headers then get past the checksum
/// and reach the fields behind it; `tar_fragment` keeps the raw bytes to test the check itself.
pub fn fix_tar_checksums(data: &mut [u8]) {
    for (i, block) in data.chunks_exact_mut(512).enumerate() {
        if i == 0 || &block[257..262] == b"ustar" {
            block[CHECKSUM].fill(b' ');
            let sum: u32 = block.iter().map(|&b| u32::from(b)).sum();
            let field = format!("{sum:06o}\0 ");
            block[CHECKSUM].copy_from_slice(field.as_bytes());
        }
    }
}

/// Splits off the first `N` bytes of `data` (zeros when it is shorter) as parameters.
pub fn params<const N: usize>(data: &[u8]) -> ([u8; N], &[u8]) {
    let mut p = [0u8; N];
    let n = data.len().min(N);
    p[..n].copy_from_slice(&data[..n]);
    (p, &data[n..])
}

/// The factor a parameter byte picks: 1, 2, 4 or 8, or an invalid 3 or 0 now and then (the
/// decoder must treat those as 1).
pub fn scale(byte: u8) -> usize {
    match byte % 8 {
        0 | 4 => 1,
        1 | 5 => 2,
        2 => 4,
        3 | 6 => 8,
        _ => usize::from(byte / 8 % 4 * 3), // 0, 3, 6 or 9
    }
}

/// A one-thread runtime, and the file a target writes its shard to (under `/dev/shm` when
/// there is one, named after `target` and this process), made once per process.
pub fn shard_file(target: &str) -> &'static (dlrs_io::Runtime, std::path::PathBuf) {
    static STATE: std::sync::OnceLock<(dlrs_io::Runtime, std::path::PathBuf)> =
        std::sync::OnceLock::new();
    STATE.get_or_init(|| {
        let shm = std::path::PathBuf::from("/dev/shm");
        let dir = if shm.is_dir() {
            shm
        } else {
            std::env::temp_dir()
        };
        let path = dir.join(format!("dlrs-fuzz-{target}-{}.tar", std::process::id()));
        (dlrs_io::Runtime::new(Some(1)).expect("a runtime"), path)
    })
}

/// The options the tar targets read their shard file with: a local file, no kept index.
pub fn file_shard_options() -> dlrs_io::TarOptions {
    dlrs_io::TarOptions {
        fetch: dlrs_io::FetchOptions::FILE,
        index_dir: None,
        ..dlrs_io::TarOptions::default()
    }
}
