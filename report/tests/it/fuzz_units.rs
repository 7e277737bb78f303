//! Fuzzing the count and duration parsers behind every `lockkit bench` flag with proptest, and
//! replaying a kept corpus of nasty inputs (`tests/corpus/units.jsonl`: parser, input, `ok N`
//! with N the count or nanoseconds, or `err`). The unit tests beside the parsers
//! (`src/units.rs`) cover the documented forms and simple round trips; this file adds arbitrary
//! input, separators, decimals and the printed form. cargo fuzz needs a nightly toolchain, which
//! this project's machines do not have; proptest runs on stable in CI.

use std::time::Duration;

use lockkit_report::units::{format_duration, parse_count, parse_duration, parse_duration_or_ms};
use proptest::prelude::*;

/// Strings made of the characters the parsers look at, so that most cases reach the number
/// and unit code rather than failing on the first character.
fn numberish() -> impl Strategy<Value = String> {
    "[ 0-9._+\\-eEkKmMgGsuµhinx\\t]{0,24}"
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 4_000, ..ProptestConfig::default() })]

    #[test]
    fn parsers_never_panic_on_any_string(s in any::<String>()) {
        let _ = parse_count(&s);
        let _ = parse_duration(&s);
        let _ = parse_duration_or_ms(&s);
    }

    #[test]
    fn parsers_never_panic_on_number_like_strings(s in numberish()) {
        if let Err(e) = parse_count(&s) {
            prop_assert!(e.contains(&format!("`{s}`")), "{}", e);
        }
        if let Err(e) = parse_duration(&s) {
            prop_assert!(e.contains(&format!("`{s}`")), "{}", e);
        }
        let _ = parse_duration_or_ms(&s);
    }

    #[test]
    fn counts_with_separators_round_trip(n in any::<u64>(), every in 1usize..5) {
        let digits = n.to_string();
        let mut text = String::new();
        for (i, c) in digits.chars().enumerate() {
            if i > 0 && i % every == 0 {
                text.push('_');
            }
            text.push(c);
        }
        prop_assert_eq!(parse_count(&text), Ok(n));
    }

    #[test]
    fn decimal_counts_are_exact_or_refused(whole in 0u64..1_000_000, frac in 0u32..1000, suffix in prop::sample::select(vec![("k", 1_000u64), ("m", 1_000_000), ("g", 1_000_000_000)])) {
        let text = format!("{whole}.{frac:03}{}", suffix.0);
        let exact = u128::from(whole) * u128::from(suffix.1) + u128::from(frac) * u128::from(suffix.1) / 1000;
        let whole_result = u128::from(frac) * u128::from(suffix.1) % 1000 == 0;
        match parse_count(&text) {
            Ok(n) => {
                prop_assert!(whole_result);
                prop_assert_eq!(u128::from(n), exact);
            }
            Err(e) => prop_assert!(!whole_result || exact > u128::from(u64::MAX), "{}", e),
        }
    }

    #[test]
    fn a_suffix_multiplies(n in 0u64..1_000_000_000) {
        prop_assert_eq!(parse_count(&format!("{n}k")), Ok(n * 1_000));
        prop_assert_eq!(parse_count(&format!("{n}K")), Ok(n * 1_000));
        prop_assert_eq!(parse_count(&format!("{}g", n % 1_000_000)), Ok((n % 1_000_000) * 1_000_000_000));
    }

    #[test]
    fn every_unit_means_what_it_says(n in 0u64..100_000) {
        prop_assert_eq!(parse_duration(&format!("{n}us")), Ok(Duration::from_micros(n)));
        prop_assert_eq!(parse_duration(&format!("{n}µs")), Ok(Duration::from_micros(n)));
        prop_assert_eq!(parse_duration(&format!("{n}ms")), Ok(Duration::from_millis(n)));
        prop_assert_eq!(parse_duration(&format!("{n}s")), Ok(Duration::from_secs(n)));
        prop_assert_eq!(parse_duration(&format!("{n}min")), Ok(Duration::from_secs(60 * n)));
        prop_assert_eq!(parse_duration(&format!("{}h", n % 87_840)), Ok(Duration::from_secs(3600 * (n % 87_840))));
        prop_assert_eq!(parse_duration_or_ms(&n.to_string()), Ok(Duration::from_millis(n)));
    }

    /// What the summary prints reads back as (about) the same duration: within the printed
    /// precision (3 significant digits, at least 0.5 us).
    #[test]
    fn printed_durations_parse_back(ns in 0u64..100_000_000_000_000) {
        let d = Duration::from_nanos(ns);
        let shown = format_duration(d);
        let back = parse_duration(&shown).unwrap_or_else(|e| panic!("{shown}: {e}"));
        let diff = back.abs_diff(d).as_secs_f64();
        prop_assert!(diff <= 5e-7 + d.as_secs_f64() * 0.005, "{:?} -> {} -> {:?}", d, shown, back);
    }

    #[test]
    fn negative_and_signed_inputs_are_refused(n in 1u64..u64::MAX, sign in prop::sample::select(vec!["-", "+"])) {
        let (count, duration) = (format!("{sign}{n}"), format!("{sign}{n}s"));
        prop_assert!(parse_count(&count).is_err(), "{}", count);
        prop_assert!(parse_duration(&duration).is_err(), "{}", duration);
    }
}

/// Replays the hand corpus: each line's parser gives exactly the expected outcome.
#[test]
fn corpus_replays_with_the_expected_outcome() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/corpus/units.jsonl");
    let text = std::fs::read_to_string(path).unwrap();
    let mut n = 0;
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let v: Vec<String> = serde_json::from_str(line).unwrap_or_else(|e| panic!("{line}: {e}"));
        let [parser, input, want] = &v[..] else {
            panic!("{line}: want [parser, input, expectation]")
        };
        let got: Result<u128, String> = match parser.as_str() {
            "count" => parse_count(input).map(u128::from),
            "duration" => parse_duration(input).map(|d| d.as_nanos()),
            "duration_or_ms" => parse_duration_or_ms(input).map(|d| d.as_nanos()),
            other => panic!("unknown parser {other}"),
        };
        match (want.strip_prefix("ok "), &got) {
            (Some(n), Ok(v)) => assert_eq!(&v.to_string(), n, "{parser} {input:?}"),
            (None, Err(e)) => {
                assert_eq!(want, "err", "{line}");
                assert!(!e.is_empty());
            }
            _ => panic!("{parser} {input:?}: expected {want}, got {got:?}"),
        }
        n += 1;
    }
    assert!(n > 50);
}
