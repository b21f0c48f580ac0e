//! Files opened where someone else may have planted a link or a FIFO: the cache, the tar index
//! directory and a served directory. A link at the last component is never followed and an
//! open never waits (a FIFO without a writer opens at once); a new file is created only where
//! nothing is.

use std::fs::{File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};

/// `options` made never to follow a link at the last component and never to wait on opening.
fn no_follow(options: &mut OpenOptions) -> &mut OpenOptions {
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK);
    }
    options
}

/// Opens `path` for reading, not through a link and without waiting. What was opened may still
/// be anything but a link (a FIFO, a directory, a device): the caller checks its metadata.
pub(crate) fn open(path: &Path) -> io::Result<File> {
    no_follow(OpenOptions::new().read(true)).open(path)
}

/// Creates a new file for writing at the first of `tries` names that `name` gives that nothing
/// holds yet; whatever is at a name already (a planted link, another writer's file) is left
/// alone. The last `AlreadyExists`, or any other error, is returned.
pub(crate) fn create_new(
    tries: u32,
    mut name: impl FnMut(u32) -> PathBuf,
) -> io::Result<(PathBuf, File)> {
    let mut last = io::Error::from(io::ErrorKind::AlreadyExists);
    for attempt in 0..tries {
        let path = name(attempt);
        match no_follow(OpenOptions::new().write(true).create_new(true)).open(&path) {
            Ok(file) => return Ok((path, file)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = e,
            Err(e) => return Err(e),
        }
    }
    Err(last)
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    #[test]
    fn a_link_is_not_followed_and_a_taken_name_is_passed_over() {
        let dir = std::env::temp_dir().join(format!("dlrs-no-follow-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let target = dir.join("target");
        std::fs::write(&target, b"kept").unwrap();
        let link = dir.join("link");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert_eq!(open(&link).unwrap_err().raw_os_error(), Some(libc::ELOOP));
        // The link's name is taken: the next name is created, the link's target untouched.
        let names = [link.clone(), dir.join("fresh")];
        let _ = std::fs::remove_file(&names[1]);
        let (made, _) = create_new(2, |i| names[i as usize].clone()).unwrap();
        assert_eq!(made, names[1]);
        assert_eq!(std::fs::read(&target).unwrap(), b"kept");
        let taken = create_new(1, |_| link.clone()).unwrap_err();
        assert_eq!(taken.kind(), io::ErrorKind::AlreadyExists);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
