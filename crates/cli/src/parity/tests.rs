//! The Rust side of parity without a Python: images, paths, errors. (The whole run against
//! Pillow is tested by tests/test_cli.py.)

use clap::Parser;

use super::*;
use crate::prefetch::tests::TempDir;

fn args(argv: &[&str]) -> ParityArgs {
    let cli = crate::Cli::try_parse_from(["dlrs", "parity"].iter().chain(argv)).unwrap();
    match cli.command {
        crate::Command::Parity(a) => a,
        other => panic!("{other:?}"),
    }
}

#[test]
fn generated_images_decode_as_written() {
    let dir = TempDir::new("parity-gen");
    let files = generate(&dir.0).unwrap();
    assert_eq!(files.len(), GENERATED.len());
    for (path, &(_, h, w, c)) in files.iter().zip(&GENERATED) {
        let im = Decode::default()
            .decode(&std::fs::read(path).unwrap())
            .unwrap();
        assert_eq!(im.shape(), [h, w, c], "{}", path.display());
    }
}

#[test]
fn user_folders_are_listed_by_extension() {
    let dir = TempDir::new("parity-user");
    for name in ["b.PNG", "a.jpg", "notes.txt", "c.tiff"] {
        std::fs::write(dir.0.join(name), b"x").unwrap();
    }
    std::fs::create_dir(dir.0.join("d.png")).unwrap();
    let names: Vec<String> = user_images(&dir.0)
        .unwrap()
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["a.jpg", "b.PNG", "c.tiff"]);
    let empty = TempDir::new("parity-empty");
    let err = user_images(&empty.0).unwrap_err();
    assert!(err.is::<crate::UsageError>());
    assert!(
        user_images(&empty.0.join("missing"))
            .unwrap_err()
            .is::<crate::UsageError>()
    );
}

#[test]
fn the_python_is_chosen_in_order() {
    assert_eq!(
        python(&args(&["--python", "/x/py"])),
        PathBuf::from("/x/py")
    );
    // $DLRS_PYTHON is read only when --python is missing; this test does not set it (the
    // environment is shared by the tests of this process).
    if std::env::var_os(PYTHON_ENV).is_none() {
        assert_eq!(python(&args(&[])), PathBuf::from("python3"));
    }
}

#[test]
fn a_python_that_fails_is_an_error() {
    let err = parity(&args(&["--python", "/bin/false"])).unwrap_err();
    let msg = format!("{err:#}");
    assert!(
        msg.starts_with("the Python side failed (/bin/false, exit status: 1)"),
        "{msg}"
    );
    let err = parity(&args(&["--python", "/nonexistent/python"])).unwrap_err();
    assert!(format!("{err:#}").starts_with("cannot run the Python /nonexistent/python"));
}

#[test]
fn injection_needs_a_known_chain() {
    let err = parity(&args(&["--inject-difference", "nope"])).unwrap_err();
    assert!(err.is::<crate::UsageError>());
    assert!(chain("resize_bilinear_down").is_some_and(|c| c.exact));
}

#[test]
fn a_kept_work_dir_holds_the_inputs_and_the_script() {
    let dir = TempDir::new("parity-work");
    let work = dir.0.join("w");
    let _ = parity(&args(&[
        "--python",
        "/bin/false",
        "--work-dir",
        work.to_str().unwrap(),
    ]));
    assert_eq!(
        std::fs::read_to_string(work.join("parity.py")).unwrap(),
        SCRIPT
    );
    let input = Array::read(&work.join("in/000.npy")).unwrap();
    assert_eq!(input.shape(), &[224, 224, 3]);
    let manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(work.join("manifest.json")).unwrap())
            .unwrap();
    assert_eq!(
        manifest["images"].as_array().unwrap().len(),
        GENERATED.len()
    );
    assert_eq!(manifest["chains"].as_array().unwrap().len(), CHAINS.len());
}
