//! Fuzzing the transcript parser and the redis-cli line splitter with proptest, and replaying a
//! kept corpus of nasty transcripts (`tests/corpus/transcript/`, expected outcomes in its
//! `expected.txt`). cargo fuzz needs a nightly toolchain, which this project's machines do not
//! have; proptest runs on stable in CI and keeps its failures in `proptest-regressions/`.

use std::path::{Path, PathBuf};

use lockkit_harness::tooling::cmdline::{quote_arg, split_args};
use lockkit_harness::tooling::transcript::{parse, parse_command};
use proptest::prelude::*;

/// Text made of the characters that matter to the parsers, so cases hit the interesting paths
/// far more often than uniform Unicode would.
fn transcript_text() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("> ".to_string()),
        Just(">".to_string()),
        Just("\n".to_string()),
        Just("\r\n".to_string()),
        Just("#".to_string()),
        Just(" ".to_string()),
        Just("\"".to_string()),
        Just("'".to_string()),
        Just("\\".to_string()),
        Just("\\x".to_string()),
        Just("\\x4".to_string()),
        Just("\\xff".to_string()),
        Just("EVALFILE ".to_string()),
        Just("SCRIPT LOADFILE ".to_string()),
        Just("FUNCTION LOADFILE ".to_string()),
        Just("XFILE ".to_string()),
        Just("99999999999999999999999 ".to_string()),
        Just("3 ".to_string()),
        Just("SET k v".to_string()),
        Just("(integer) 1".to_string()),
        Just("\0".to_string()),
        "[a-z0-9]{1,4}",
        "\\PC{1,3}",
        any::<char>().prop_map(String::from),
    ];
    prop::collection::vec(piece, 0..40).prop_map(|v| v.concat())
}

fn no_such_dir() -> PathBuf {
    // Directive files are looked up beside the transcript; keep them from finding real files.
    PathBuf::from("/nonexistent-lockkit-fuzz/t.txt")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2_000, ..ProptestConfig::default() })]

    #[test]
    fn split_args_never_panics(s in "\\PC{0,64}", raw in any::<String>()) {
        let _ = split_args(&s);
        let _ = split_args(&raw);
    }

    #[test]
    fn quoted_args_split_back_unchanged(args in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..12), 1..6)) {
        let line = args.iter().map(|a| quote_arg(a)).collect::<Vec<_>>().join(" ");
        prop_assert_eq!(split_args(&line).unwrap(), args);
    }

    #[test]
    fn parser_never_panics_and_errors_name_file_and_line(text in transcript_text()) {
        let path = no_such_dir();
        match parse(&text, &path) {
            Ok(t) => {
                // Every case points at a real line that starts a command.
                let lines: Vec<&str> = text.lines().collect();
                for c in t.cases() {
                    prop_assert!(c.line >= 1 && c.line <= lines.len());
                    prop_assert!(lines[c.line - 1].starts_with('>'));
                }
            }
            Err(e) => {
                let n = text.lines().count();
                prop_assert!(e.line >= 1 && e.line <= n, "line {} of {}: {}", e.line, n, e);
                let shown = e.to_string();
                let prefix = format!("{}:{}: ", path.display(), e.line);
                prop_assert!(shown.starts_with(&prefix), "{}", shown);
            }
        }
    }

    #[test]
    fn rendering_a_parsed_transcript_parses_to_the_same(text in transcript_text()) {
        let path = no_such_dir();
        if let Ok(t) = parse(&text, &path) {
            let again = parse(&t.render(&[]), &path).expect("a rendered transcript parses");
            prop_assert_eq!(again.items, t.items);
        }
    }

    #[test]
    fn a_command_line_of_quoted_args_parses_back(args in prop::collection::vec("[A-Za-z0-9 \"'\\\\\n\t]{0,8}", 1..5)) {
        let quoted: Vec<String> = args.iter().map(|a| quote_arg(a.as_bytes())).collect();
        // A leading all-digit argument would be read as a repeat count.
        prop_assume!(!args[0].bytes().all(|b| b.is_ascii_digit()) || args.len() == 1);
        // Directives need files; those are tested by hand.
        prop_assume!(!args[0].to_ascii_uppercase().ends_with("FILE"));
        prop_assume!(args.len() < 2 || !args[1].to_ascii_uppercase().ends_with("FILE"));
        let text = format!("> {}\n", quoted.join(" "));
        let t = parse(&text, &no_such_dir()).unwrap();
        let case = t.cases().next().unwrap();
        let want: Vec<Vec<u8>> = args.iter().map(|a| a.as_bytes().to_vec()).collect();
        prop_assert_eq!(&case.argv, &want);
        prop_assert_eq!(case.repeat, 1);
    }
}

#[test]
fn repeat_counts_past_usize_are_refused() {
    let e = parse_command("99999999999999999999999 PING", Path::new("")).unwrap_err();
    assert_eq!(e, "repeat count out of range");
}

fn corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus/transcript")
}

/// Replays every file of the corpus: each parses or fails exactly as `expected.txt` says
/// (`ok N` for N commands, `err LINE fragment`), and every file has a line there.
#[test]
fn corpus_replays_with_the_expected_outcome() {
    let manifest = std::fs::read_to_string(corpus().join("expected.txt")).unwrap();
    let mut seen = 0;
    for line in manifest
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
    {
        let (name, want) = line.split_once('\t').expect("name<TAB>expectation");
        let path = corpus().join(name);
        let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{name}: {e}"));
        let text = String::from_utf8_lossy(&bytes);
        let got = parse(&text, &path);
        match (want.split_once(' '), &got) {
            (Some(("ok", n)), Ok(t)) => {
                assert_eq!(t.cases().count().to_string(), n, "{name}");
                let items = parse(&t.render(&[]), &path).unwrap().items;
                assert_eq!(items, t.items, "{name}: render round trip");
            }
            (Some(("err", rest)), Err(e)) => {
                let (line_no, fragment) = rest.split_once(' ').unwrap_or((rest, ""));
                assert_eq!(e.line.to_string(), line_no, "{name}: {e}");
                assert!(e.message.contains(fragment), "{name}: {e}");
                assert!(
                    e.to_string()
                        .starts_with(&format!("{}:{}: ", path.display(), e.line)),
                    "{e}"
                );
            }
            _ => panic!(
                "{name}: expected {want}, got {:?}",
                got.map(|t| t.items.len())
            ),
        }
        seen += 1;
    }
    let files = std::fs::read_dir(corpus())
        .unwrap()
        .filter(|e| e.as_ref().unwrap().file_name() != "expected.txt")
        .count();
    assert_eq!(seen, files, "every corpus file has a line in expected.txt");
}
