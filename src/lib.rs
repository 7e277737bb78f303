//! lockkit (being built).
pub mod error;
pub mod options;
pub mod scripts;
