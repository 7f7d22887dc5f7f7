//! The model (being written).
