//! lockkit-harness (being built).
