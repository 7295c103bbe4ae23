//! The fuzz smoke run of `cargo test`: for every target, the seeds, the committed
//! corpus (`fuzz/corpus/<target>/`), every committed regression input
//! (`fuzz/regressions/<target>/`), then deterministic mutations of them for a bounded
//! time and number of runs. Stable Rust, no libFuzzer. The long, coverage-guided run
//! is `scripts/fuzz.sh`.

use std::io::Write;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tranche_fuzzing::mutate::{mutate, Rng};
use tranche_fuzzing::{seeds::seeds, Target, TARGETS};

/// Mutation budget per target: whichever ends first.
const MUTATION_TIME: Duration = Duration::from_millis(2500);
const MUTATION_RUNS: u64 = 50_000;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The files of a folder, sorted; none when it does not exist.
fn files(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return vec![];
    };
    let mut out: Vec<(PathBuf, Vec<u8>)> = rd
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .map(|p| {
            let bytes = std::fs::read(&p).unwrap();
            (p, bytes)
        })
        .collect();
    out.sort();
    out
}

/// Runs the target on one input; a panic fails the test and leaves the input where the
/// message says.
fn run_one(t: &Target, input: &[u8], origin: &str) {
    if catch_unwind(AssertUnwindSafe(|| (t.run)(input))).is_err() {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("fuzz-smoke");
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(format!("{}-crash-{:016x}", t.name, fnv(input)));
        std::fs::write(&path, input).unwrap();
        panic!(
            "target {} panicked on {origin} ({} bytes), saved at {}; once fixed, commit it under fuzz/regressions/{}/",
            t.name,
            input.len(),
            path.display(),
            t.name
        );
    }
}

fn fnv(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf29ce484222325, |h, x| {
        (h ^ *x as u64).wrapping_mul(0x100000001b3)
    })
}

#[test]
fn fuzz_smoke_every_target() {
    let mut report = String::from("fuzz smoke (seeds, corpus, regressions, then mutations):\n");
    for (i, t) in TARGETS.iter().enumerate() {
        let generated = seeds(t.name);
        assert!(!generated.is_empty(), "target {} has no seeds", t.name);
        let corpus = files(&repo().join("fuzz/corpus").join(t.name));
        assert!(
            !corpus.is_empty(),
            "fuzz/corpus/{} is empty; run `cargo test -p tranche-fuzzing -- --ignored write_seed_corpus`",
            t.name
        );
        let regressions = files(&repo().join("fuzz/regressions").join(t.name));
        for s in &generated {
            run_one(t, s, "a generated seed");
        }
        for (p, b) in corpus.iter().chain(&regressions) {
            run_one(t, b, &p.display().to_string());
        }
        let mut pool = generated;
        pool.extend(corpus.into_iter().map(|(_, b)| b));
        pool.extend(regressions.iter().map(|(_, b)| b.clone()));
        let mut rng = Rng::new(0x7a5c_0000 + i as u64);
        let mut input = Vec::new();
        let start = Instant::now();
        let mut runs = 0;
        // A time budget, not an assertion: a slow machine runs fewer mutations, and the
        // report says how many ran.
        while runs < MUTATION_RUNS && start.elapsed() < MUTATION_TIME {
            mutate(&mut rng, &pool, t.framed, &mut input);
            run_one(t, &input, "a mutated input (seeded, repeats each run)");
            runs += 1;
        }
        report += &format!(
            "  {:<14} {:>3} seeds+corpus, {:>2} regressions, {runs:>6} mutations in {:.1} s\n",
            t.name,
            pool.len() - regressions.len(),
            regressions.len(),
            start.elapsed().as_secs_f64()
        );
    }
    // Straight to stderr, past the test harness's capture: the run says what it did.
    let _ = std::io::stderr().write_all(report.as_bytes());
}

/// Writes the seeds into `fuzz/corpus/<target>/`, with the example policy and every
/// scenario file of `tests/scenarios/`.
#[test]
#[ignore = "writes the committed seed corpus; run by hand when the seeds change"]
fn write_seed_corpus() {
    // The file targets' seeds are the files themselves, copied below.
    for t in TARGETS.iter().filter(|t| !t.name.ends_with("_file")) {
        let dir = repo().join("fuzz/corpus").join(t.name);
        std::fs::create_dir_all(&dir).unwrap();
        for (i, s) in seeds(t.name).iter().enumerate() {
            std::fs::write(dir.join(format!("seed-{i:02}")), s).unwrap();
        }
    }
    let policy = repo().join("config/policy.toml");
    let dir = repo().join("fuzz/corpus/policy_file");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(&policy, dir.join("policy.toml")).unwrap();
    let dir = repo().join("fuzz/corpus/scenario_file");
    std::fs::create_dir_all(&dir).unwrap();
    for (p, _) in files(&repo().join("tests/scenarios")) {
        std::fs::copy(&p, dir.join(p.file_name().unwrap())).unwrap();
    }
}
