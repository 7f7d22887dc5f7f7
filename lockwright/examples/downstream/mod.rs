//! The in-memory stand-in for the data's store that the fencing and election examples
//! write to.

/// It remembers the highest fence it accepted and refuses a write with a lower one, naming
/// that fence: what a fenced writer expects of the systems it writes to.
#[derive(Default)]
pub struct Downstream(std::sync::Mutex<u64>);

impl Downstream {
    /// Accepts a write with `fence`, or refuses it with the highest fence accepted.
    pub fn write(&self, fence: u64) -> Result<(), u64> {
        let mut highest = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if fence < *highest {
            return Err(*highest);
        }
        *highest = fence;
        Ok(())
    }
}
