//! The report crate's integration tests: one test binary (`cargo test -p lockkit-report --test
//! it`), one module per area, as in every crate of the workspace (issue 43); a new area is a file
//! here and a `mod` line below.

mod fuzz_units;
