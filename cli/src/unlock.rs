//! `lockwright unlock`: release a lock id's locks; the lock id comes from an environment
//! variable or standard input, never from the command line.

use clap::Args;
use lockwright::{Client, LockId};
use tokio::io::AsyncReadExt;

use crate::connect::{ConnArgs, connect};
use crate::exit::{self, CliError};

/// `lockwright unlock`.
#[derive(Debug, Args)]
#[group(required = true, multiple = false, id = "source")]
pub struct UnlockArgs {
    /// Read the lock id from the environment variable VAR.
    #[arg(long, value_name = "VAR", group = "source")]
    lock_id_from_env: Option<String>,
    /// Read the lock id from the first line of standard input.
    #[arg(long, group = "source")]
    lock_id_stdin: bool,
}

/// The most bytes read from standard input for a lock id.
const MAX_STDIN: u64 = 64 * 1024;

/// Runs `lockwright unlock`.
pub async fn unlock(conn: &ConnArgs, args: &UnlockArgs) -> Result<u8, CliError> {
    let lock_id = read_lock_id(args).await?;
    let lock_id = LockId::new(lock_id).map_err(lockwright::Error::from)?;
    let client = Client::new(connect(conn).await?);
    let released = client.unlock(lock_id.as_str()).await?;
    if released.is_empty() {
        return Err(CliError::new(
            exit::FAILURE,
            format!("no lock is held under lock id {}", lock_id.tag()),
        ));
    }
    println!(
        "released {} lock(s) of lock id {}",
        released.len(),
        lock_id.tag()
    );
    for lock in &released {
        println!("  `{}` {} fence {}", lock.resource, lock.mode, lock.fence);
    }
    Ok(exit::OK)
}

/// The lock id, from the variable or the first line of standard input, without
/// surrounding whitespace.
async fn read_lock_id(args: &UnlockArgs) -> Result<String, CliError> {
    let (raw, source) = if let Some(var) = &args.lock_id_from_env {
        let value = std::env::var(var).map_err(|e| {
            CliError::usage(format!(
                "--lock-id-from-env: environment variable `{}`: {e}",
                exit::one_line(var)
            ))
        })?;
        (value, "the environment variable")
    } else {
        let mut input = String::new();
        tokio::io::stdin()
            .take(MAX_STDIN)
            .read_to_string(&mut input)
            .await
            .map_err(|e| CliError::usage(format!("--lock-id-stdin: cannot read: {e}")))?;
        let first = input.lines().next().unwrap_or_default().to_owned();
        (first, "standard input")
    };
    let trimmed = raw.trim();
    if trimmed.is_empty() {
        return Err(CliError::usage(format!("no lock id in {source}")));
    }
    Ok(trimmed.to_owned())
}
