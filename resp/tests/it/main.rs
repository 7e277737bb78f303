//! The request parser's integration tests: one test binary (`cargo test -p lockkit-resp --test
//! it`), one module per area, as in every crate of the workspace (issue 43); a new area is a file
//! here and a `mod` line below.

mod differential;
