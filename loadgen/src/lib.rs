//! lockkit-loadgen (being built).
