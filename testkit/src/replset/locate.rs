//! Where the mongod binary and libfaketime are.

use std::path::{Path, PathBuf};

use super::Error;

/// The environment variable that names the mongod binary to use, before any other.
pub const MONGOD_ENV: &str = "LOCKWRIGHT_MONGOD";

/// The environment variable that names libfaketime's shared library, before the usual
/// places.
pub const LIBFAKETIME_ENV: &str = "LOCKWRIGHT_LIBFAKETIME";

/// Where a Debian or Ubuntu package (`libfaketime`) or a source install puts the library.
const LIBFAKETIME_PLACES: [&str; 5] = [
    "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/faketime/libfaketime.so.1",
    "/usr/lib64/faketime/libfaketime.so.1",
    "/usr/local/lib/faketime/libfaketime.so.1",
];

/// The root of the Lockwright workspace (the parent of this crate's directory).
#[must_use]
pub fn workspace_root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().unwrap_or(manifest).to_path_buf()
}

/// The file in which `scripts/mongod.sh install` records the path of the mongod it
/// installed: `.tools/mongo-venv/.mongod-path` under the workspace root.
#[must_use]
pub fn mongod_path_file() -> PathBuf {
    workspace_root().join(".tools/mongo-venv/.mongod-path")
}

/// The mongod binary: `LOCKWRIGHT_MONGOD` if set, else the one `scripts/mongod.sh install`
/// recorded in [`mongod_path_file`].
///
/// # Errors
///
/// [`Error::NotFound`] when neither names an existing file, saying how to install one.
pub fn find_mongod() -> Result<PathBuf, Error> {
    if let Some(path) = std::env::var_os(MONGOD_ENV).filter(|p| !p.is_empty()) {
        let path = PathBuf::from(path);
        return if path.is_file() {
            Ok(path)
        } else {
            Err(Error::NotFound(format!(
                "{MONGOD_ENV}={} is not a file",
                path.display()
            )))
        };
    }
    let file = mongod_path_file();
    let not_found = |why: String| {
        Error::NotFound(format!(
            "no mongod binary: {why}. Run `scripts/mongod.sh install` (it installs MongoDB 6.0.5 \
             into .tools/ and records its path there), or set {MONGOD_ENV} to a mongod binary"
        ))
    };
    let recorded = std::fs::read_to_string(&file)
        .map_err(|e| not_found(format!("cannot read {}: {e}", file.display())))?;
    let path = PathBuf::from(recorded.trim());
    if path.is_file() {
        Ok(path)
    } else {
        Err(not_found(format!(
            "{} names {}, which does not exist",
            file.display(),
            path.display()
        )))
    }
}

/// libfaketime's shared library (for members with a clock offset): `LOCKWRIGHT_LIBFAKETIME`
/// if set, else the first of the usual places that exists.
///
/// # Errors
///
/// [`Error::NotFound`] when there is none, saying how to install it.
pub fn find_libfaketime() -> Result<PathBuf, Error> {
    if let Some(path) = std::env::var_os(LIBFAKETIME_ENV).filter(|p| !p.is_empty()) {
        let path = PathBuf::from(path);
        return if path.is_file() {
            Ok(path)
        } else {
            Err(Error::NotFound(format!(
                "{LIBFAKETIME_ENV}={} is not a file",
                path.display()
            )))
        };
    }
    LIBFAKETIME_PLACES
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
        .ok_or_else(|| {
            Error::NotFound(format!(
                "a member with a clock offset needs libfaketime, which is not installed (looked \
                 in {}). Run `scripts/mongod.sh install` (it installs the Debian package \
                 libfaketime), or `apt-get install libfaketime`, or set {LIBFAKETIME_ENV}",
                LIBFAKETIME_PLACES.join(", ")
            ))
        })
}
